"""Add/Sub/Mul/Div of computed tensors of different ranks (``models.onnx.ops.Binary``): an image batch (NHWC in the
engine) broadcast into a rank-5 output (MaxViT's attention bias, ``[1, heads, t, t]``, added to its
``[N, windows, heads, t, t]`` scores) and a lower rank broadcast into an image batch, each against numpy's
broadcasting of the ONNX-layout tensors and by float64 finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from models.onnx.ops import Binary, from_onnx, to_onnx
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import Operands, nhwc_shape



CASES = [("Add", (2, 3, 2, 4, 4), (1, 2, 4, 4)),  # MaxViT: rank-4 bias into rank-5 scores
         ("Mul", (2, 3, 4, 5), (3, 4, 5)),  # rank 3 into an image batch
         ("Div", (2, 3, 4, 5), (5,)),
         ("Sub", (1, 2, 4, 4), (2, 3, 2, 4, 4))]


@pytest.mark.parametrize("op,a_shape,b_shape", CASES)
def test_mixed_ranks_broadcast_as_onnx_does(op, a_shape, b_shape):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.uniform(1, 2, b_shape)
    out_rank = max(len(a_shape), len(b_shape))
    binary = Binary("b", op, ["a", "b"], "y", [len(a_shape), len(b_shape)], out_rank)
    got = binary.forward([from_onnx(a), from_onnx(b)], training=True)
    want = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](a, b)
    np.testing.assert_allclose(to_onnx(got) if out_rank == 4 else got, want, rtol=1e-15)


@pytest.mark.parametrize("op,a_shape,b_shape", CASES)
def test_mixed_ranks_backward_matches_finite_differences(op, a_shape, b_shape):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(int(np.prod(a_shape))), rng.uniform(1, 2, int(np.prod(b_shape)))])
    binary = Binary("b", op, ["a", "b"], "y", [len(a_shape), len(b_shape)], max(len(a_shape), len(b_shape)))
    check_layer(Operands(binary, nhwc_shape(a_shape), nhwc_shape(b_shape)), x, samples=40, rtol=1e-6)
