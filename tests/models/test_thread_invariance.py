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
