"""The engine's gradient all-reduce, for a training loop of your own.

``Engine`` sums every micro-batch's gradients of every local replica into one flat float64 buffer
(a view per parameter), all-reduces that buffer across the instances in one collective and writes
the mean into each parameter's ``grad``. :class:`GradientAllReduce` is that step on its own, for a
loop that calls the model itself (``launch/examples/custom_loop.py``)::

    grads = GradientAllReduce(model.params(), popdist.get_comm())
    grads.zero()
    for each local replica r, each micro-batch a:       # forward, loss, backward: layers write p.grad
        grads.add()
    grads.allreduce_mean(total_replicas * grad_accum)   # every p.grad: the mean over the global batch
    optimizer.step(lr)

The float64 sum makes the result independent of how the replicas are split over the instances
(see :class:`ipu.runtime.engine.Engine`); every instance ends with the same gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ipu.runtime.engine import flat_views


class GradientAllReduce:
    """One flat buffer over ``params``' gradients, summed locally and all-reduced across instances."""

    def __init__(self, params: Sequence, comm, dtype=np.float64) -> None:
        self.params, self.comm = list(params), comm
        self.flat = np.zeros(sum(p.data.size for p in self.params), dtype=dtype)
        self.views = flat_views(self.params, self.flat)
        self.count = 0  # backward passes added since zero()

    def zero(self) -> None:
        """Start a weight update: forget the sums of the last one."""
        self.flat.fill(0.0)
        self.count = 0

    def add(self) -> None:
        """Add every parameter's ``grad`` (what the backward pass just wrote) to the sums."""
        for view, p in zip(self.views, self.params):
            view += p.grad
        self.count += 1

    def allreduce_mean(self, total: int) -> None:
        """Sum the buffers of every instance (one collective, in place) and write ``sum / total`` into
        each ``p.grad``; ``total`` is the number of backward passes over all instances (total replicas
        x gradient accumulation, when each adds one per micro-batch)."""
        if total <= 0:
            raise ValueError(f"allreduce_mean needs the number of backward passes over all instances, got {total}")
        self.comm.allreduce(self.flat, op="sum")
        for view, p in zip(self.views, self.params):
            np.multiply(view, 1.0 / total, out=p.grad, casting="unsafe")


__all__ = ["GradientAllReduce"]
