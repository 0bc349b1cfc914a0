"""The 1x1 convolution's three products (forward, input gradient, weight gradient), each through
the formulation this machine measured fastest for its shape (``models.kernels.wisdom``): the
register-blocked pointwise kernels, the direct kernel's weight gradient, or BLAS. Without wisdom
(``POPRUN_WISDOM=off``) the fixed rules on the shape decide (``pointwise.suits``,
``pointwise.suits_weight_grad``, measured on Zen 1). A mixin of :class:`models.conv.Conv2d`, which
keeps the weights and buffers these methods use.
"""

from __future__ import annotations

import numpy as np

from models.kernels import direct_conv as D
from models.kernels import gemm as _gemm
from models.kernels import pointwise as P
from models.kernels import threads as _threads
from models.kernels import wisdom as W

_DIRECT_WGRAD_MAX = 4096  # 1x1 weight gradients with at most this many entries use the direct kernel,
_DIRECT_WGRAD_ROWS = 8192  # and so do those summed over at least this many pixels (the rules without wisdom)
WGRAD_CHUNKS = 4  # partial sums of the kernels' weight gradients, summed in chunk order: a constant,
# so that the result does not depend on the thread count (each thread takes whole chunks)


class PointwiseProducts:
    """The pointwise path of :class:`models.conv.Conv2d`."""

    def _forward_pointwise(self, x2: np.ndarray, y2: np.ndarray) -> None:
        """y2 = x2 @ W^T: the pointwise kernel (on the weight transposed into [Cin, Cout]) or BLAS,
        whichever this machine measured faster for the shape (``wisdom``; the shape rule without)."""
        w2 = self.weight.data.reshape(self.cout, self.cin)

        def hand():
            wt = self._temp("conv_weight", (self.cin, self.cout))
            np.copyto(wt, w2.T)
            P.matmul(np.ascontiguousarray(x2), wt, y2, _threads.get_num_threads())

        shape = (x2.shape[0], self.cin, self.cout)
        self._pick("conv1x1.forward", shape, {"pointwise": hand, "blas": lambda: _gemm.matmul(x2, w2.T, y2)},
                   P.eligible(*shape, self.dtype), P.suits(*shape, self.dtype, transposes_weight=True))

    def _pick(self, kind: str, shape: tuple, candidates: dict, eligible: bool, rule: bool) -> None:
        """Run the hand kernel (the first candidate) or BLAS (``blas``), as ``wisdom`` chose (``rule``:
        the hand kernel where wisdom is off); BLAS where the hand kernel cannot take the shape."""
        if not eligible:
            return candidates["blas"]()
        candidates[W.choose(kind, shape, candidates, next(iter(candidates)) if rule else "blas")]()

    def _backward_pointwise(self, dy):
        dy2, x2 = dy.reshape(-1, self.cout), self.x.reshape(-1, self.cin)
        w2 = self.weight.data.reshape(self.cout, self.cin)
        self._weight_grad_pointwise(dy2, x2, self.weight.grad.reshape(self.cout, self.cin))
        if not self.need_dx:
            return None
        dx = self._input_grad_buf()
        dx2 = dx.reshape(-1, self.cin)
        shape = (dy2.shape[0], self.cout, self.cin)
        self._pick("conv1x1.input_grad", shape,
                   {"pointwise": lambda: P.matmul(np.ascontiguousarray(dy2), w2, dx2, _threads.get_num_threads()),
                    "blas": lambda: _gemm.matmul(dy2, w2, dx2)},
                   P.eligible(*shape, self.dtype), P.suits(*shape, self.dtype))
        return dx

    def _weight_grad_pointwise(self, dy2, x2, grad) -> None:
        """grad [Cout, Cin] = dy2^T x2 through one of three formulations, as ``wisdom`` chose (the
        shape rules without): the pointwise kernel (:func:`P.suits_weight_grad`; [Cout, Cin] as
        dy^T x or its transpose x^T dy, the wider side as N, the register block's vectors, first),
        the direct kernel's weight gradient, or BLAS. For a long reduction over pixels (or few
        channels) the direct kernel beat OpenBLAS on Zen 1 (20-25 against 10-12 GFLOP/s; BLAS won
        short reductions into matrices from ~64 x 128)."""
        m = dy2.shape[0]
        candidates, rule = {}, None
        for a, b, flip in sorted([(dy2, x2, False), (x2, dy2, True)], key=lambda o: -o[1].shape[1]):
            if P.eligible_weight_grad(m, a.shape[1], b.shape[1], self.dtype):
                def pointwise(a=a, b=b, flip=flip):
                    part = self._pointwise_weight_grad(a, b)
                    grad[...] = part.T if flip else part

                candidates.setdefault("pointwise", pointwise)
                if P.suits_weight_grad(m, a.shape[1], b.shape[1], self.dtype):
                    candidates["pointwise"], rule = pointwise, "pointwise"
                    break
        if D.vec_for(self.cin) or D.vec_for(self.cout):
            candidates["direct"] = lambda: self._direct_weight_grad_1x1(dy2, x2, grad)
            small = m >= _DIRECT_WGRAD_ROWS or self.cin * self.cout <= _DIRECT_WGRAD_MAX
            rule = rule or ("direct" if small else None)
        candidates["blas"] = lambda: _gemm.matmul_tn(dy2, x2, grad, self._temp(
            "gemm_partials", _gemm.scratch_shape(self.cout, self.cin)))
        candidates[W.choose("conv1x1.weight_grad", (m, self.cout, self.cin), candidates, rule or "blas")]()

    def _direct_weight_grad_1x1(self, dy2, x2, grad) -> None:
        """The 1x1 weight gradient through the direct kernel's: a 1x1 kernel does not care where rows
        end, so pixels go in runs of up to 128 (the kernel keeps a run's accumulators in registers),
        with enough runs for every thread."""
        m = dy2.shape[0]
        run = max(d for d in range(1, min(128, max(m // (2 * WGRAD_CHUNKS), 1)) + 1) if m % d == 0)
        x5, dy5 = x2.reshape(1, m // run, run, 1, self.cin), dy2.reshape(1, m // run, run, 1, self.cout)
        if D.vec_for(self.cin):
            grad[...] = self._weight_grad(dy5, x5, (0, 0))[0, 0, 0]
        else:
            grad[...] = self._weight_grad(x5, dy5, (0, 0))[0, 0, 0].T

    def _pointwise_weight_grad(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a^T @ b by the pointwise kernel: ``WGRAD_CHUNKS`` partials (whole chunks per thread), summed in order."""
        part = self._temp("conv_wgrad_part", (WGRAD_CHUNKS, a.shape[1], b.shape[1]))  # not per thread
        P.weight_grad(np.ascontiguousarray(a), np.ascontiguousarray(b), part)
        return part.sum(axis=0)
