"""GradientAllReduce: the engine's gradient all-reduce for a loop of one's own (ipu.runtime.gradients)."""

import numpy as np
import pytest

from ipu.runtime.gradients import GradientAllReduce
from models.param import Param
from poprun_py.comm import LoopbackComm


def test_the_mean_over_every_backward_pass_lands_in_each_grad():
    params = [Param("w", np.zeros((2, 3), np.float32)), Param("b", np.zeros(3, np.float32), kind="bias")]
    grads = GradientAllReduce(params, LoopbackComm())
    grads.zero()
    for k in (1.0, 2.0, 6.0):  # three micro-batches' backward passes write p.grad
        params[0].grad[...] = k
        params[1].grad[...] = -k
        grads.add()
    grads.allreduce_mean(3)
    assert grads.count == 3 and grads.flat.dtype == np.float64
    np.testing.assert_array_equal(params[0].grad, np.full((2, 3), 3.0, np.float32))
    np.testing.assert_array_equal(params[1].grad, np.full(3, -3.0, np.float32))
    grads.zero()
    assert not grads.flat.any() and grads.count == 0
    with pytest.raises(ValueError, match="number of backward passes over all instances, got 0"):
        grads.allreduce_mean(0)
