"""Optimizer configuration and factory: the public entry point of the update rules.

    opt = make_optimizer(OptimConfig(name="lars", momentum=0.885, weight_decay=2.5e-6), params)
    opt.step(schedule.lr_at(update_step))        # after the engine has filled param.grad

| name       | rule                                   | ``weight_decay`` means        | file          |
|------------|----------------------------------------|-------------------------------|---------------|
| ``sgd``      | TF momentum ``v = m v + lr g; w -= v``    | L2 added to the gradient      | momentum.py   |
| ``nesterov`` | the same with Nesterov's look-ahead    | L2 added to the gradient      | momentum.py   |
| ``lars``     | the same with the LARS trust ratio     | L2 inside LARS (TF/Graphcore) | momentum.py   |
| ``adam``     | ``torch.optim.Adam``                      | L2 added to the gradient      | adam.py       |
| ``adamw``    | ``torch.optim.AdamW``                     | decoupled ``w *= 1 - lr wd``     | adam.py       |
| ``rmsprop``  | TF1 ``RMSPropOptimizer`` (ms starts at 1) | L2 added to the gradient      | rmsprop.py    |

Weight decay and the LARS trust ratio apply only to parameters with ``param.decays`` (kind
``weight``); norm scales/offsets and biases are exempt, as in TF's LARS skip list.
The learning rate is not part of this config: the schedule owns it (``ScheduleConfig.base_lr``)
and passes it to every ``step(lr)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.optim.adam import Adam
from models.optim.momentum import MomentumSGD, lars_trust_ratio
from models.optim.optimizer_base import Optimizer
from models.param import Param
from models.optim.rmsprop import RMSPropTF

__all__ = [
    "OPTIMIZER_NAMES",
    "Adam",
    "MomentumSGD",
    "OptimConfig",
    "Optimizer",
    "RMSPropTF",
    "lars_trust_ratio",
    "make_optimizer",
]

OPTIMIZER_NAMES = ("sgd", "nesterov", "lars", "adam", "adamw", "rmsprop")


@dataclass(frozen=True)
class OptimConfig:
    """Hyperparameters of every optimizer; each rule reads the fields it uses (table above).

    Defaults are the Graphcore G16 recipe's LARS values where they exist (eta 0.001,
    epsilon 0), Adam's usual ones, and EfficientNet's RMSProp ones (rho 0.9, eps via ``eps``:
    set ``eps=1e-3`` for the EfficientNet recipe, TF1's own default is 1e-10).
    """

    name: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)
    rho: float = 0.9
    rmsprop_initial_ms: float = 1.0
    lars_eta: float = 0.001
    lars_epsilon: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))  # YAML gives lists
        if self.name not in OPTIMIZER_NAMES:
            raise ValueError(f"optim.name={self.name!r} is not one of {', '.join(OPTIMIZER_NAMES)}")
        _check_range("momentum", self.momentum, 0.0, 1.0)
        _check_range("rho", self.rho, 0.0, 1.0)
        if len(self.betas) != 2:
            raise ValueError(f"optim.betas={self.betas!r} must be two numbers (beta1, beta2)")
        _check_range("betas[0]", self.betas[0], 0.0, 1.0)
        _check_range("betas[1]", self.betas[1], 0.0, 1.0)
        for field, value in (
            ("weight_decay", self.weight_decay),
            ("lars_epsilon", self.lars_epsilon),
            ("rmsprop_initial_ms", self.rmsprop_initial_ms),
        ):
            if not value >= 0.0:
                raise ValueError(f"optim.{field}={value!r} must be >= 0")
        if not self.eps > 0.0:
            raise ValueError(f"optim.eps={self.eps!r} must be > 0 (it keeps Adam/RMSProp from dividing by 0)")
        if not self.lars_eta > 0.0:
            raise ValueError(f"optim.lars_eta={self.lars_eta!r} must be > 0 (the paper and TF use 0.001)")


def make_optimizer(cfg: OptimConfig, params: Sequence[Param]) -> Optimizer:
    """Build the optimizer named by ``cfg.name`` over ``params`` (state allocated here, once)."""
    if cfg.name in ("sgd", "nesterov", "lars"):
        return MomentumSGD(
            params,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            nesterov=cfg.name == "nesterov",
            lars_eta=cfg.lars_eta if cfg.name == "lars" else 0.0,
            lars_epsilon=cfg.lars_epsilon,
        )
    if cfg.name in ("adam", "adamw"):
        return Adam(
            params,
            betas=cfg.betas,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            decoupled=cfg.name == "adamw",
        )
    return RMSPropTF(
        params,
        rho=cfg.rho,
        momentum=cfg.momentum,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        initial_ms=cfg.rmsprop_initial_ms,
    )


def _check_range(field: str, value: float, lo: float, hi: float) -> None:
    """``lo <= value < hi``, else a ValueError naming the field."""
    if not lo <= value < hi:
        raise ValueError(f"optim.{field}={value!r} must be in [{lo}, {hi})")
