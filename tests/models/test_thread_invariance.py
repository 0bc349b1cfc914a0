"""A model's numbers do not depend on how many threads computed them.

Every split of work whose partial results are combined (GEMM blocks, weight-gradient chunks, norm
reductions) is a function of the shapes, never of the thread count: otherwise 1 instance x 4
replicas on a 2-CPU host (2 threads) and 2 x 2 (1 thread each) would train different weights.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

import models
from models.loss import softmax_cross_entropy
from models.registry import build_model

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs NUMBA_NUM_THREADS >= 2")


@pytest.mark.parametrize("name,res,options", [
    ("efficientnet-tiny", 28, {}),  # batch norm; pointwise, depthwise and the stem's direct kernel
    ("efficientnet-tiny", 28, {"norm": "group"}),  # the default job's model
    ("efficientnet-tiny-g16-gn", 32, {}),  # G16 grouped convolutions
    ("dense-mnist", 28, {}),
])
def test_one_and_two_threads_train_bitwise_alike(name, res, options):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, res, res, 1)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    old, runs = models.get_num_threads(), []
    try:
        for threads in (1, 2):
            models.set_num_threads(threads)
            model = build_model(name, 10, resolution=res, in_channels=1, seed=3, **options)
            logits = model.forward(x, True)
            _, dlogits = softmax_cross_entropy(logits, y)
            model.backward(dlogits, need_dx=False)
            runs.append((logits.tobytes(), {p.name: p.grad.tobytes() for p in model.params()}))
    finally:
        models.set_num_threads(old)
    assert runs[0][0] == runs[1][0], "forward"
    differ = [k for k in runs[0][1] if runs[0][1][k] != runs[1][1][k]]
    assert not differ, f"gradients that depend on the thread count: {differ[:5]}"


@pytest.mark.parametrize("cin,cout,k,groups,shape", [
    (96, 96, 1, 1, (32, 56, 56)),  # a long pointwise product (100,352 rows)
    (16, 512, 1, 1, (8, 14, 14)),  # few input channels into many
    (512, 16, 1, 1, (8, 14, 14)),
    (96, 96, 3, 6, (8, 28, 28)),  # G16
    (224, 224, 5, 14, (8, 12, 12)),  # G16 on a small map: the weight gradient by groups
    (96, 96, 3, 96, (8, 28, 28)),  # depthwise
])
def test_a_convolution_computes_bitwise_alike_on_one_and_two_threads(cin, cout, k, groups, shape):
    from models.conv import Conv2d

    rng = np.random.default_rng(cin + cout)
    x = rng.standard_normal((*shape, cin)).astype(np.float32)
    old, runs = models.get_num_threads(), []
    try:
        for threads in (1, 2):
            models.set_num_threads(threads)
            conv = Conv2d("c", "b", cin, cout, k, 1, "symmetric", groups)
            conv.weight.data[...] = np.random.default_rng(7).standard_normal(conv.weight.data.shape)
            y = conv.forward(x, True)
            dy = np.random.default_rng(8).standard_normal(y.shape).astype(np.float32)
            dx = conv.backward(dy)
            runs.append((y.tobytes(), dx.tobytes(), conv.weight.grad.tobytes()))
    finally:
        models.set_num_threads(old)
    assert [a == b for a, b in zip(*runs)] == [True, True, True]  # y, dx, dw
