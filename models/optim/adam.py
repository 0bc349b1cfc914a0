"""Adam and AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019), in ``torch.optim``'s form.

    g' = g + wd * w                      (Adam with weight_decay; decaying parameters only)
    w <- w * (1 - lr * wd)               (AdamW instead: decoupled decay; decaying parameters only)
    m <- b1 * m + (1 - b1) * g'
    s <- b2 * s + (1 - b2) * g'^2
    w <- w - (lr / (1 - b1^t)) * m / (sqrt(s) / sqrt(1 - b2^t) + eps)

``t`` is the optimizer's update count (``state_dict()["step"]``), starting at 1.
Parameters with ``decays == False`` (norm scales/offsets, biases) are never decayed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from models.optim.optimizer_base import Optimizer
from models.param import Param


class Adam(Optimizer):
    """Adam; ``decoupled=True`` is AdamW.

    State per parameter: ``exp_avg`` (m) and ``exp_avg_sq`` (s), param dtype, zeros.
    """

    num_scratch = 2

    def __init__(
        self,
        params: Sequence[Param],
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled: bool = False,
    ) -> None:
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.decoupled = bool(decoupled)
        super().__init__(params)

    def init_state(self, param: Param) -> dict[str, np.ndarray]:
        return {"exp_avg": np.zeros_like(param.data), "exp_avg_sq": np.zeros_like(param.data)}

    def update(self, param: Param, state: dict[str, np.ndarray], lr: float) -> None:
        g = param.grad
        if param.decays and self.weight_decay != 0.0:
            if self.decoupled:
                param.data *= 1.0 - lr * self.weight_decay
            else:
                g = np.multiply(param.data, self.weight_decay, out=self.scratch(param, 1))
                g += param.grad
        tmp = self.scratch(param, 0)
        m, s = state["exp_avg"], state["exp_avg_sq"]
        m *= self.beta1
        m += np.multiply(g, 1.0 - self.beta1, out=tmp)
        s *= self.beta2
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - self.beta2
        s += tmp
        t = self.num_updates
        np.sqrt(s, out=tmp)
        tmp *= 1.0 / math.sqrt(1.0 - self.beta2**t)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= lr / (1.0 - self.beta1**t)
        param.data -= tmp
