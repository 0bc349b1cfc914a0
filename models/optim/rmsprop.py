"""RMSProp in the TensorFlow 1 form that EfficientNet was trained with.

``tf.compat.v1.train.RMSPropOptimizer`` (used by tensorflow/tpu EfficientNet and Graphcore's
TF1 CNN code) applies, per element:

    g' = g + wd * w                          (L2 decay; decaying parameters only. EfficientNet
                                              adds wd * l2_loss to the loss, whose gradient is this)
    ms  <- rho * ms + (1 - rho) * g'^2
    mom <- m * mom + lr * g' / sqrt(ms + eps)   (eps *inside* the square root)
    w   <- w - mom

TF1 initialises ``ms`` to **ones** (``_create_slots`` uses ``ones_initializer``), which damps the
first updates; Keras' RMSprop and ``torch.optim.RMSprop`` start from zeros. We default to 1.0,
as the EfficientNet reference did; ``initial_ms=0.0`` gives the zero start.
EfficientNet's values: rho 0.9, momentum 0.9, eps 1e-3.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.optim.optimizer_base import Optimizer
from models.param import Param


class RMSPropTF(Optimizer):
    """TF1 RMSProp with momentum. State: ``mean_square`` (``initial_ms``) and ``momentum`` (zeros)."""

    num_scratch = 2

    def __init__(
        self,
        params: Sequence[Param],
        rho: float = 0.9,
        momentum: float = 0.9,
        eps: float = 1e-3,
        weight_decay: float = 0.0,
        initial_ms: float = 1.0,
    ) -> None:
        self.rho = float(rho)
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.weight_decay = float(weight_decay)
        self.initial_ms = float(initial_ms)
        super().__init__(params)

    def init_state(self, param: Param) -> dict[str, np.ndarray]:
        return {
            "mean_square": np.full_like(param.data, self.initial_ms),
            "momentum": np.zeros_like(param.data),
        }

    def update(self, param: Param, state: dict[str, np.ndarray], lr: float) -> None:
        g = param.grad
        if param.decays and self.weight_decay != 0.0:
            g = np.multiply(param.data, self.weight_decay, out=self.scratch(param, 1))
            g += param.grad
        tmp = self.scratch(param, 0)
        ms, mom = state["mean_square"], state["momentum"]
        ms *= self.rho
        np.multiply(g, g, out=tmp)
        tmp *= 1.0 - self.rho
        ms += tmp
        np.add(ms, self.eps, out=tmp)
        np.sqrt(tmp, out=tmp)
        np.divide(g, tmp, out=tmp)
        tmp *= lr
        mom *= self.momentum
        mom += tmp
        param.data -= mom
