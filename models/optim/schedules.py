"""Learning-rate schedules, indexed by weight update (not micro-batch).

All kinds share a linear warmup from 0: ``lr = peak * step / warmup`` for ``step <= warmup``
(so ``lr_at(0) == 0`` and ``lr_at(warmup) == peak``), then:

* ``constant``:    ``base_lr``.
* ``polynomial``:  ``(lr0 - lr_end) * (1 - t/T)**power + lr_end``, ``lr_end = end_ratio * lr0``,
  ``t = step - warmup``, ``T = total - warmup`` (Graphcore ``polynomial_decay_lr.py``; their
  G16 recipe uses power 2, end ratio 1e-5, warmup 70 of 350 epochs).
* ``cosine``:      ``lr_end + (lr0 - lr_end) * (1 + cos(pi * t/T)) / 2``.
* ``exponential``: ``lr0 * decay_rate**floor(step / (decay_epochs * steps_per_epoch))``
  (EfficientNet's 0.97 every 2.4 epochs, staircase). The decay counts from step 0, and the
  warmup ramps to the already-decayed value, as Graphcore's ``exponential.py`` does
  (tensorflow/tpu instead ramps to ``lr0`` and then jumps down).

Past ``total`` the decaying kinds hold their final value. ``warmup_epochs`` become
``floor(warmup_epochs * steps_per_epoch)`` updates; pass ``steps_per_epoch`` as a float
(``dataset_size / global_batch``) to reproduce Graphcore's ``total * warmup_epochs // epochs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULE_KINDS = ("constant", "polynomial", "exponential", "cosine")


@dataclass(frozen=True)
class ScheduleConfig:
    """Shape of the learning rate over training; lengths come from ``make_schedule``."""

    kind: str = "constant"
    base_lr: float = 0.1
    warmup_epochs: float = 0.0
    warmup_steps: int | None = None  # overrides warmup_epochs when set
    power: float = 2.0
    end_ratio: float = 1e-5
    decay_rate: float = 0.97
    decay_epochs: float = 2.4

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise ValueError(f"schedule.kind={self.kind!r} is not one of {', '.join(SCHEDULE_KINDS)}")
        if not (math.isfinite(self.base_lr) and self.base_lr > 0.0):
            raise ValueError(f"schedule.base_lr={self.base_lr!r} must be a finite number > 0")
        if not self.warmup_epochs >= 0.0:
            raise ValueError(f"schedule.warmup_epochs={self.warmup_epochs!r} must be >= 0")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"schedule.warmup_steps={self.warmup_steps!r} must be >= 0")
        if self.warmup_steps is not None and self.warmup_epochs > 0.0:
            raise ValueError("set schedule.warmup_steps or schedule.warmup_epochs, not both")
        if not self.power > 0.0:
            raise ValueError(f"schedule.power={self.power!r} must be > 0")
        if not 0.0 <= self.end_ratio <= 1.0:
            raise ValueError(f"schedule.end_ratio={self.end_ratio!r} must be in [0, 1]")
        if not 0.0 < self.decay_rate <= 1.0:
            raise ValueError(f"schedule.decay_rate={self.decay_rate!r} must be in (0, 1]")
        if not self.decay_epochs > 0.0:
            raise ValueError(f"schedule.decay_epochs={self.decay_epochs!r} must be > 0")


@dataclass(frozen=True)
class Schedule:
    """A schedule with its lengths resolved; ``lr_at(step)`` is a pure function of the step."""

    cfg: ScheduleConfig
    steps_per_epoch: float
    total_steps: int
    warmup_steps: int

    @property
    def end_lr(self) -> float:
        return self.cfg.end_ratio * self.cfg.base_lr

    def lr_at(self, update_step: int) -> float:
        """Learning rate for weight update number ``update_step`` (0-based)."""
        if update_step < 0:
            raise ValueError(f"update_step={update_step} must be >= 0")
        peak = self._decayed(min(update_step, self.total_steps))
        if update_step <= self.warmup_steps and self.warmup_steps > 0:
            return peak * update_step / self.warmup_steps
        return peak

    def _decayed(self, step: int) -> float:
        """The value without warmup: the peak during warmup, the decay curve after it."""
        cfg = self.cfg
        if cfg.kind == "constant":
            return cfg.base_lr
        if cfg.kind == "exponential":
            period = cfg.decay_epochs * self.steps_per_epoch
            return cfg.base_lr * cfg.decay_rate ** math.floor(step / period)
        span = self.total_steps - self.warmup_steps
        frac = max(step - self.warmup_steps, 0) / span
        if cfg.kind == "polynomial":
            shape = (1.0 - frac) ** cfg.power
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * frac))
        return (cfg.base_lr - self.end_lr) * shape + self.end_lr


def make_schedule(cfg: ScheduleConfig, steps_per_epoch: float, total_steps: int) -> Schedule:
    """Resolve warmup and decay lengths for a run of ``total_steps`` weight updates."""
    if not steps_per_epoch > 0:
        raise ValueError(f"steps_per_epoch={steps_per_epoch!r} must be > 0 (weight updates per epoch)")
    if total_steps < 1:
        raise ValueError(f"total_steps={total_steps!r} must be >= 1 (weight updates in the run)")
    if cfg.warmup_steps is not None:
        warmup = int(cfg.warmup_steps)
    else:
        warmup = math.floor(cfg.warmup_epochs * steps_per_epoch)
    if cfg.kind in ("polynomial", "cosine") and warmup >= total_steps:
        raise ValueError(
            f"warmup of {warmup} updates leaves nothing to decay over {total_steps} total updates; "
            "shorten schedule.warmup_epochs/warmup_steps or train longer"
        )
    return Schedule(cfg, float(steps_per_epoch), int(total_steps), warmup)


def lr_from_exponent(exponent: float, global_batch: int) -> float:
    """Graphcore's base learning rate ``2**exponent * global_batch`` (-9.5, 6144 -> 8.485)."""
    if global_batch < 1:
        raise ValueError(f"global_batch={global_batch!r} must be >= 1")
    return 2.0**exponent * global_batch
