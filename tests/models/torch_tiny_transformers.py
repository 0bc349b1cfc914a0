"""Tiny torch transformers written as torchvision writes ViT and Swin (``vit_b_16``, ``swin_t``), for the ONNX
graph model's tests: a patch-embedding convolution, ViT's class token (``expand``) and position embedding,
``nn.MultiheadAttention`` (sequence first inside: ``[tokens, N, D]``), Swin's window partition and reverse (the
windows folded into the batch: ``[N * windows, tokens, D]``), its shifted windows (``torch.roll`` and the
attention mask), relative position bias (a parameter gathered by a constant index), patch merging, LayerNorm,
GELU MLPs and a head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Mlp(nn.Sequential):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(0.0), nn.Linear(hidden, dim), nn.Dropout(0.0))


class EncoderBlock(nn.Module):
    """torchvision's ViT ``EncoderBlock``: pre-norm MultiheadAttention (batch first outside, sequence first inside),
    pre-norm GELU MLP, residuals."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class TinyViT(nn.Module):
    """torchvision's ``VisionTransformer`` in small: conv patches, class token, position embedding, encoder, head
    on the class token."""

    def __init__(self, image: int = 8, patch: int = 4, dim: int = 8, heads: int = 2, layers: int = 2,
                 classes: int = 5) -> None:
        super().__init__()
        self.patch, self.dim = patch, dim
        self.conv_proj = nn.Conv2d(3, dim, patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.pos_embedding = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderBlock(dim, heads, 2 * dim) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.dim, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


def relative_position_index(window: int) -> torch.Tensor:
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return (rel[:, :, 0] * (2 * window - 1) + rel[:, :, 1]).flatten()


def window_attention(x, qkv: nn.Linear, proj: nn.Linear, bias, window: int, heads: int, shift: int):
    """torchvision's ``shifted_window_attention`` (no padding: the feature map a multiple of the window)."""
    b, h, w, c = x.shape
    if shift:
        x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
    windows = (h // window) * (w // window)
    x = x.view(b, h // window, window, w // window, window, c)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(b * windows, window * window, c)
    t = x.size(1)
    q, k, v = qkv(x).reshape(x.size(0), t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
    attn = (q * (c // heads) ** -0.5).matmul(k.transpose(-2, -1)) + bias
    if shift:
        mask = x.new_zeros((h, w))
        cuts = ((0, -window), (-window, -shift), (-shift, None))
        count = 0
        for hs in cuts:
            for ws in cuts:
                mask[hs[0]:hs[1], ws[0]:ws[1]] = count
                count += 1
        mask = mask.view(h // window, window, w // window, window).permute(0, 2, 1, 3).reshape(windows, t)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        attn = attn.view(x.size(0) // windows, windows, heads, t, t) + mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, heads, t, t)
    x = F.softmax(attn, dim=-1).matmul(v).transpose(1, 2).reshape(x.size(0), t, c)
    x = proj(x).view(b, h // window, w // window, window, window, c)
    x = x.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
    if shift:
        x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
    return x


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, shift: int) -> None:
        super().__init__()
        self.heads, self.window, self.shift = heads, window, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.1)
        self.register_buffer("relative_position_index", relative_position_index(window))
        self.mlp = Mlp(dim, 2 * dim)

    def forward(self, x):
        t = self.window * self.window
        bias = self.relative_position_bias_table[self.relative_position_index].view(t, t, -1)
        bias = bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        x = x + window_attention(self.norm1(x), self.qkv, self.proj, bias, self.window, self.heads, self.shift)
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm, self.reduction = nn.LayerNorm(4 * dim), nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduction(self.norm(x))


class TinySwin(nn.Module):
    """torchvision's ``SwinTransformer`` in small: conv patches (channels last), a window block and a shifted one,
    patch merging, a block, norm, mean over H and W, head."""

    def __init__(self, dim: int = 8, heads: int = 2, window: int = 2, classes: int = 5) -> None:
        super().__init__()
        self.patch = nn.Sequential(nn.Conv2d(3, dim, 2, stride=2))
        self.norm0 = nn.LayerNorm(dim)
        self.stage1 = nn.Sequential(SwinBlock(dim, heads, window, 0), SwinBlock(dim, heads, window, window // 2))
        self.merge = PatchMerging(dim)
        self.stage2 = SwinBlock(2 * dim, heads, window, 0)
        self.norm = nn.LayerNorm(2 * dim)
        self.head = nn.Linear(2 * dim, classes)

    def forward(self, x):
        x = self.norm0(self.patch(x).permute(0, 2, 3, 1))
        x = self.norm(self.stage2(self.merge(self.stage1(x))))
        return self.head(x.permute(0, 3, 1, 2).mean((2, 3)))
