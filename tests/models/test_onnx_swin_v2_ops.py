"""What torchvision's Swin-V2 adds to Swin (``models.onnx``): ReduceL2 (``F.normalize``'s cosine attention), Exp
(its clamped logit scale), ScatterND of a parameter (the key's third of the qkv bias zeroed) and a MatMul of a fixed
buffer by a weight (the position MLP on the relative coordinates table). float64 finite-difference checks of each
op, and a small cosine-attention block with all of them whose logits and gradients equal torch's in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.onnx.ops import Unary
from models.onnx.ops_attention import MatMul
from models.onnx.ops_tensor import ReduceL2, ScatterND
from models.param import Param
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import OpLayer, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


@pytest.mark.parametrize("shape,axes,keepdims", [((2, 3, 4), (2,), True), ((2, 3, 4), (1, 2), False),
                                                  ((2, 4, 3, 5), (1,), True)])
def test_reduce_l2_matches_numpy_and_finite_differences(shape, axes, keepdims):
    x = np.random.default_rng(0).standard_normal(shape)
    engine = x.transpose(0, 2, 3, 1) if x.ndim == 4 else x
    y = ReduceL2("r", ["x"], "y", axes, keepdims).forward([engine], training=True)
    want = np.sqrt((x * x).sum(axis=axes, keepdims=keepdims))
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2) if y.ndim == 4 else y, want, rtol=1e-15)
    check_layer(OpLayer(ReduceL2("r", ["x"], "y", axes, keepdims)), engine.copy(), samples=30, rtol=1e-6)


def test_reduce_l2_of_zeros_passes_no_gradient_as_torchs():
    op = ReduceL2("r", ["x"], "y", (1,), True)
    op.forward([np.zeros((2, 3))], training=True)
    assert not np.any(op.backward(np.ones((2, 1)))[0])
    x = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    torch.linalg.vector_norm(x, dim=1, keepdim=True).sum().backward()
    assert not torch.any(x.grad)


def test_exp_matches_finite_differences():
    check_layer(OpLayer(Unary("e", "Exp", ["x"], "y", {})), np.random.default_rng(1).standard_normal((2, 5)),
                samples=20, rtol=1e-6)


def test_scatter_nd_writes_the_updates_and_passes_no_gradient_there():
    op = ScatterND("s", ["x"], "y", np.array([[1], [3]]), np.zeros(2))
    y = op.forward([np.arange(1.0, 6.0)], training=True)
    np.testing.assert_array_equal(y, [1, 0, 3, 0, 5])
    np.testing.assert_array_equal(op.backward(np.ones(5))[0], [1, 0, 1, 0, 1])
    check_layer(OpLayer(ScatterND("s", ["x"], "y", np.array([[0, 1], [2, 0]]), np.zeros(2))),
                np.random.default_rng(2).standard_normal((3, 2)), samples=6, rtol=1e-6)


def test_matmul_of_a_fixed_buffer_by_a_weight_trains_the_weight_only():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((1, 5, 2))
    w = Param("w", rng.standard_normal((2, 4)), "weight")
    op = MatMul("m", [table, w], "y")
    y = op.forward([], training=True)
    np.testing.assert_allclose(y, table @ w.data, rtol=1e-15)
    dy = rng.standard_normal(y.shape)
    assert op.backward(dy) == []
    np.testing.assert_allclose(w.grad, (table.transpose(0, 2, 1) @ dy).sum(0), rtol=1e-13)


class CosineAttention(nn.Module):
    """torchvision's ``ShiftedWindowAttentionV2`` in small, over the tokens of a feature map: qkv with the key's
    bias zeroed (clone + zero_), cosine scores (F.normalize) times a clamped, exponentiated logit scale, a
    continuous position bias from an MLP on a fixed coordinates table (16 sigmoid), softmax, projection."""

    def __init__(self, dim: int = 8, heads: int = 2, tokens: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 16), nn.ReLU(inplace=True), nn.Linear(16, heads, bias=False))
        self.register_buffer("table", torch.randn(1, tokens, tokens, 2))
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)  # [N, T, D]
        n, tokens, d = t.shape
        bias = self.qkv.bias.clone()
        bias[d:2 * d].zero_()
        qkv = F.linear(t, self.qkv.weight, bias).reshape(n, tokens, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
        scores = scores * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        position = 16 * torch.sigmoid(self.cpb_mlp(self.table).permute(0, 3, 1, 2))  # [1, heads, T, T]
        out = torch.softmax(scores + position, dim=-1) @ v
        t = t + self.proj(out.transpose(1, 2).reshape(n, tokens, d))
        return self.head(t.mean(1))


def test_a_swin_v2_style_cosine_attention_block_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(CosineAttention(), (2, 3, 4, 4), opset=18)
    kinds = {type(op).__name__ for op in graph_ops(model)}
    assert {"ReduceL2", "ScatterND", "MatMul"} <= kinds


@pytest.mark.parametrize("held,want", [(32 ** -0.5, 32 ** -0.5), (2 ** 0.5, 2 ** 0.5), (0.001, 0.001), (1e-5, 1e-5),
                                       (0.1, 0.1), (1 / 3, 0.33333334), (0.5, 0.5)])
def test_a_float32_constant_reads_as_the_value_the_model_held(held, want):
    """MaxViT's attention scale, 32 ** -0.5, is a float32 Constant in the graph: it reads back as the root, a typed
    decimal as itself, anything else as its shortest decimal."""
    from models.onnx.fold import decimal

    assert decimal(np.float32(held)) == want
