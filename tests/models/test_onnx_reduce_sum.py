"""ReduceSum trains (``models.onnx``, timm's MobileViT-V2 linear attention): float64 finite differences of the op,
and a small linear-attention block (softmax scores summed against the keys) whose logits and gradients equal
torch's in float64."""

from __future__ import annotations

import numpy as np
import pytest

from models.onnx.ops_tensor import ReduceMean
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import OpLayer, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn


@pytest.mark.parametrize("axes,keepdims", [((2,), True), ((1, 2), False)])
def test_reduce_sum_matches_numpy_and_finite_differences(axes, keepdims):
    x = np.random.default_rng(0).standard_normal((2, 3, 4))
    op = ReduceMean("r", ["x"], "y", axes, keepdims, total=True)
    np.testing.assert_allclose(op.forward([x], training=True), x.sum(axis=axes, keepdims=keepdims), rtol=1e-15)
    check_layer(OpLayer(ReduceMean("r", ["x"], "y", axes, keepdims, total=True)), x, samples=30, rtol=1e-6)


class LinearAttention(nn.Module):
    """MobileViT-V2's separable self-attention in small: one score per token (softmax over the tokens), a context
    vector summed from the keys, broadcast onto the values."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.qkv = nn.Conv2d(dim, 1 + 2 * dim, 1)
        self.head = nn.Linear(dim, 4)

    def forward(self, x):
        x = self.stem(x)
        n, d, h, w = x.shape
        q, k, v = self.qkv(x).flatten(2).split([1, d, d], dim=1)  # [N, 1 | D | D, T]
        context = (k * torch.softmax(q, dim=-1)).sum(dim=-1, keepdim=True)  # [N, D, 1]
        out = torch.relu(v) * context
        return self.head(out.mean(-1))


def test_a_linear_attention_block_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(LinearAttention(), (2, 3, 4, 4))
    assert any(type(op).__name__ == "ReduceMean" and op.total for op in graph_ops(model))
