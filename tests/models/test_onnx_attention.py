"""Softmax on any axis and MatMul of two computed tensors (or one and a constant weight) train
(``models.onnx.ops_attention``): float64 finite-difference checks of both ops, and a tiny self-attention network
(torch's ``Linear`` on tokens, scaled dot products, softmax, heads as a rank-4 tensor) whose logits and gradients
equal torch's in float64; the graph's opset 11 Softmax (the axes from ``axis`` on as one) too."""

from __future__ import annotations

import numpy as np
import pytest

from models.onnx.ops_attention import MatMul, Softmax
from models.param import Param
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import OpLayer, Operands, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.mark.parametrize("axis,rank,flatten", [(-1, 3, False), (1, 4, False), (2, 4, False), (1, 4, True)])
def test_softmax_backward_matches_finite_differences(axis, rank, flatten):
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)[:rank]) * 2
    check_layer(OpLayer(Softmax("s", ["x"], "y", axis, rank, flatten)), x, samples=30, rtol=1e-6)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (1, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (2, 4, 3)),
                                             ((2, 3, 4), (4,)), ((2, 3, 5, 4), (2, 3, 4, 5))])
def test_matmul_of_two_computed_tensors_matches_finite_differences(a_shape, b_shape):
    """Batch axes broadcast, vectors promoted as numpy does, rank 4 (ONNX's shapes; NHWC inside)."""
    a_shape, b_shape = (tuple(s[i] for i in (0, 2, 3, 1)) if len(s) == 4 else s for s in (a_shape, b_shape))
    x = np.random.default_rng(1).standard_normal(int(np.prod(a_shape)) + int(np.prod(b_shape)))
    check_layer(Operands(MatMul("m", ["a", "b"], "y"), a_shape, b_shape), x, samples=40, rtol=1e-6)


def test_matmul_by_a_constant_weight_matches_finite_differences():
    rng = np.random.default_rng(2)
    op = MatMul("m", ["a", Param("w", rng.standard_normal((4, 6)), "weight")], "y")
    check_layer(OpLayer(op), rng.standard_normal((2, 3, 4)), samples=30, rtol=1e-6)


class Attention(nn.Module):
    """One self-attention block over the pixels of a feature map: two heads ([N, heads, tokens, d], rank 4),
    scaled dot products, softmax of the keys' axis, the values, an output projection, a residual."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)  # [N, T, D]
        n, tokens, d = t.shape
        q, k, v = (f(t).reshape(n, tokens, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)
        t = t + self.proj((a @ v).transpose(1, 2).reshape(n, tokens, d))
        return self.head(self.norm(t).transpose(1, 2).reshape(n, d, 4, 4).mean((2, 3)))


def test_a_self_attention_block_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(Attention(), (2, 3, 4, 4))
    kinds = {type(op).__name__ for op in graph_ops(model)}
    assert {"MatMul", "Softmax", "LayerNorm"} <= kinds
    weights = {s.initializer: s.param.kind for s in model.sites}
    assert weights["q.weight"] == "weight" and weights["q.bias"] == "bias"  # decayed / exempt as the built-ins


class OldSoftmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.fc = nn.Linear(3 * 4 * 5, 2)

    def forward(self, x):
        return self.fc(torch.softmax(self.conv(x).flatten(1), dim=1))


def test_opset_11_softmax_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    assert_step_equals_torch(OldSoftmax(), (2, 2, 4, 5), opset=11)


class NoBiasHead(nn.Module):
    """A classifier head without bias on [N, features]: torch exports MatMul(x, Transpose(weight))."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.fc = nn.Linear(6, 4, bias=False)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))


def test_a_linear_without_bias_trains_as_torchs_under_torchs_name():
    torch.manual_seed(0)
    model = assert_step_equals_torch(NoBiasHead(), (2, 3, 4, 4))
    assert {s.initializer for s in model.sites} == {"conv.weight", "conv.bias", "fc.weight"}
