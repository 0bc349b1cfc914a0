"""Momentum SGD in TensorFlow's form, with LARS as a named variant of the same rule.

One rule covers SGD, Nesterov SGD and LARS (as ``tf.raw_ops.ApplyMomentum`` with the
learning rate folded into the velocity, the way TF's and Graphcore's ``LARSOptimizer`` call it):

    g' = g + wd * w                                   (decaying parameters only)
    u  = lr * trust * g'                              (trust = 1 unless LARS)
    v <- m * v + u
    w <- w - v                 (Nesterov: w <- w - (u + m * v))

LARS (You et al. 2017; TF ``lars_optimizer.py``) sets the per-tensor trust ratio

    trust = eta * ||w|| / (||g|| + wd * ||w|| + eps),   or 1 when ||w|| == 0 or ||g|| == 0,

with the norms taken on the raw gradient, before weight decay. Parameters with
``decays == False`` (norm scales/offsets, biases: TF's skip list ``beta, gamma, bias``) get
plain momentum with the raw learning rate: no trust ratio, no weight decay.

Float32 and float64 parameters take one compiled call for all of them (``_kernels.py``: the same
arithmetic in the same order, bitwise equal to the per-parameter numpy path); float16 ones (and
``POPRUN_JIT=0``) take the per-parameter path. Norms are sums of squares accumulated in float64.

The lr lives inside ``v`` (TF), not outside it (``torch.optim.SGD``: ``v <- m v + g; w -= lr v``).
The two agree exactly while lr is constant; when the schedule changes lr, TF's velocity keeps
the old rate's steps, which is what the Graphcore recipe trained with.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np
from numba import typed

from jit import ENABLED
from models.optim import _kernels
from models.optim.optimizer_base import Optimizer
from models.param import Param, generation


_DATA, _GRAD = operator.attrgetter("data"), operator.attrgetter("grad")


def _array_ids(params) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids of every parameter's ``data`` and ``grad`` arrays (the bound lists hold those arrays,
    so equal ids mean the same arrays); compared only when ``models.param.generation`` says that
    some parameter's array was replaced."""
    return tuple(map(id, map(_DATA, params))), tuple(map(id, map(_GRAD, params)))


def lars_trust_ratio(w_norm: float, g_norm: float, eta: float, weight_decay: float, eps: float) -> float:
    """The LARS local learning-rate multiplier, exactly as TF computes it (1 if a norm is 0)."""
    if w_norm > 0.0 and g_norm > 0.0:
        return eta * w_norm / (g_norm + weight_decay * w_norm + eps)
    return 1.0


class MomentumSGD(Optimizer):
    """SGD with TF-style momentum; ``lars_eta > 0`` turns on the LARS trust ratio.

    State per parameter: ``momentum`` (the velocity ``v``, param dtype, zeros).
    """

    num_scratch = 2

    def __init__(
        self,
        params: Sequence[Param],
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        lars_eta: float = 0.0,
        lars_epsilon: float = 0.0,
    ) -> None:
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.nesterov = bool(nesterov)
        self.lars_eta = float(lars_eta)
        self.lars_epsilon = float(lars_epsilon)
        super().__init__(params)
        self._fused = self._bind()

    def _bind(self):
        """The typed lists the compiled step works on, or None where it cannot (mixed or float16
        dtypes, non-contiguous arrays, ``POPRUN_JIT=0``). Holds the arrays it was built from:
        a parameter whose ``data`` or ``grad`` is replaced by another array rebinds."""
        if not ENABLED or not self.params:
            return None
        dtype = self.params[0].data.dtype
        arrays = [(p.data, p.grad, self.state[p.name]["momentum"]) for p in self.params]
        if dtype not in (np.float32, np.float64) or any(
                a.dtype != dtype or not a.flags.c_contiguous for trio in arrays for a in trio):
            return None
        ws, gs, vs = (typed.List([trio[k].reshape(-1) for trio in arrays]) for k in range(3))
        decays = np.array([p.decays for p in self.params])
        lars = decays & (self.lars_eta > 0.0)
        return {"arrays": arrays, "ids": _array_ids(self.params), "generation": generation(),
                "ws": ws, "gs": gs, "vs": vs, "dtype": dtype, "decays": decays,
                "lars": lars, "any_lars": bool(lars.any()), "decay_terms": decays & (self.weight_decay != 0.0),
                "norms": np.zeros((len(self.params), 2)), "rates": np.zeros(len(self.params), dtype),
                "consts": np.array([self.weight_decay, self.momentum], dtype)}

    def step(self, lr: float) -> None:
        fused = self._fused
        if fused is not None and fused["generation"] != generation():  # some parameter's array was replaced
            if _array_ids(self.params) != fused["ids"]:  # one of ours: rebind
                fused = self._fused = self._bind()
            else:
                fused["generation"] = generation()
        if fused is None:
            super().step(lr)
            return
        self.check_lr(lr)
        self.num_updates += 1
        if fused["any_lars"]:
            _kernels.norms_into(fused["ws"], fused["gs"], fused["lars"], fused["norms"])
        _kernels.lars_rates(fused["norms"], fused["lars"], float(lr), self.lars_eta, self.weight_decay,
                            self.lars_epsilon, fused["rates"])
        _kernels.momentum_apply(fused["ws"], fused["gs"], fused["vs"], fused["rates"],
                                fused["decay_terms"], fused["consts"], self.nesterov)

    def init_state(self, param: Param) -> dict[str, np.ndarray]:
        return {"momentum": np.zeros_like(param.data)}

    def update(self, param: Param, state: dict[str, np.ndarray], lr: float) -> None:
        u = self.scratch(param, 0)
        scaled_lr = lr
        if param.decays and self.lars_eta > 0.0:
            scaled_lr = lr * self.trust_ratio(param)
        if param.decays and self.weight_decay != 0.0:
            np.multiply(param.data, self.weight_decay, out=u)
            u += param.grad
            u *= scaled_lr
        else:
            np.multiply(param.grad, scaled_lr, out=u)
        v = state["momentum"]
        v *= self.momentum
        v += u
        if self.nesterov:
            param.data -= u
            np.multiply(v, self.momentum, out=u)
            param.data -= u
        else:
            param.data -= v

    def trust_ratio(self, param: Param) -> float:
        """LARS trust ratio of one parameter, norms accumulated in float32 or wider."""
        wide = self.scratch(param, 1, np.float32) if param.data.dtype == np.float16 else None
        w_norm = _l2_norm(param.data, wide)
        g_norm = _l2_norm(param.grad, wide)
        return lars_trust_ratio(w_norm, g_norm, self.lars_eta, self.weight_decay, self.lars_epsilon)


def _l2_norm(x: np.ndarray, f32_scratch: np.ndarray | None) -> float:
    """||x||_2 as a Python float, squares summed in float64; float16 input is widened into
    ``f32_scratch`` first."""
    if f32_scratch is not None:
        np.copyto(f32_scratch, x)
        x = f32_scratch
    return math.sqrt(_kernels.sum_squares(np.ascontiguousarray(x).reshape(-1)))
