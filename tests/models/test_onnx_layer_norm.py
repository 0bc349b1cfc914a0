"""LayerNormalization trains (``models.onnx.ops_norm.LayerNorm`` on the engine's group norm): a float64
finite-difference check of the op, and torch's values and gradients for ViT's layer norm of tokens, ConvNeXt's
channels-last ``LayerNorm2d`` (one norm of the NHWC channels, no transposes), a norm over (C, H, W) and over (H, W),
without bias; its scale and bias are norm parameters (no weight decay, no LARS)."""

from __future__ import annotations

import numpy as np
import pytest

from models.norm import GroupNorm
from models.onnx.ops_norm import LayerNorm
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import OpLayer, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.mark.parametrize("onnx_layout", [False, True])
def test_layer_norm_backward_matches_finite_differences_in_float64(onnx_layout):
    """Over the last axis of ONNX's layout of an image batch (W: transposed each way), and over the NHWC channels."""
    rng = np.random.default_rng(0)
    k = 5 if onnx_layout else 3
    layer = GroupNorm("ln", "ln", k, 1, 1e-5, None, np.float64)
    layer.weight.data[...] = rng.standard_normal(k)
    layer.bias.data[...] = rng.standard_normal(k)
    op = LayerNorm("ln", ["x"], "y", layer, onnx_layout, (True, True), 3)
    check_layer(OpLayer(op), rng.standard_normal((2, 4, 5, 3)) * 2 + 1, samples=30, rtol=1e-6)


class Tokens(nn.Module):
    """ViT's pre-norm on [N, tokens, D] and a norm over the last two axes, without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.ln2 = nn.LayerNorm([16, 8], bias=False)
        self.head = nn.Linear(16 * 8, 5)

    def forward(self, x):
        t = x.flatten(2).transpose(1, 2)
        return self.head(self.ln2(self.ln(t) * 2.0).flatten(1))


class Images(nn.Module):
    """A norm over (C, H, W) (the engine's rows, weights in (H, W, C) order) and one over (H, W) (ONNX's layout)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.chw = nn.LayerNorm([4, 5, 6], eps=1e-3)
        self.hw = nn.LayerNorm([5, 6])
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.hw(self.chw(self.conv(x))).mean((2, 3)))


class ChannelsLast(nn.Module):
    """ConvNeXt's LayerNorm2d: permute to NHWC, norm the channels, permute back."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8, eps=1e-6)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        x = self.norm(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(x.mean((2, 3)))


@pytest.mark.parametrize("net,shape", [(Tokens, (2, 8, 4, 4)), (Images, (2, 3, 5, 6)), (ChannelsLast, (3, 3, 5, 4))])
def test_layer_norms_train_as_torchs_in_float64(net, shape):
    torch.manual_seed(0)
    model = net()
    with torch.no_grad():  # weights that are not ones and zeros
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_()
                if m.bias is not None:
                    m.bias.normal_()
    graph_model = assert_step_equals_torch(model, shape)
    ops = graph_ops(graph_model)
    norms = [op for op in ops if isinstance(op, LayerNorm)]
    assert norms and all(p.kind in ("norm_scale", "norm_offset") for op in norms for p in op.params())
    if net is ChannelsLast:  # one norm of the engine's channels, no transposes left
        assert [type(op).__name__ for op in ops] == ["LayerOp", "LayerNorm", "LayerOp", "LayerOp"]
        assert not norms[0].onnx_layout
    if net is Tokens:  # LayerNorm(bias=False): torch exports a zero constant, which stays fixed
        assert [len(op.params()) for op in norms] == [2, 1]


def test_a_written_back_layer_norm_is_torchs_layout(tmp_path):
    """The (C, H, W) norm's weights, kept in (H, W, C) order, are written back as torch holds them."""
    torch.manual_seed(0)
    model = Images()
    with torch.no_grad():
        model.chw.weight.normal_()
    graph_model = assert_step_equals_torch(model, (2, 3, 5, 6))
    site = next(s for s in graph_model.sites if s.initializer == "chw.weight")
    np.testing.assert_array_equal(site.to_onnx(site.param.data), model.chw.weight.detach().numpy())
