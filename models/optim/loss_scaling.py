"""Loss scaling (static and dynamic) and the error a non-finite loss raises.

Graphcore's recipe multiplies the loss by a static 128 before backward and divides the
gradients by 128 before LARS. The engine does, each weight update:

    loss_for_backward = loss * scaler.scale
    ... backward, accumulate, all-reduce ...
    finite = scaler.unscale_(grads) and math.isfinite(loss)
    if scaler.update(finite, step=step, loss=loss):
        optimizer.step(lr)

* **static**: ``update`` returns True on finite steps; on a non-finite loss or gradient it
  raises ``NonFiniteLossError`` naming the step: the run stops.
* **dynamic** (mixed-precision style): a non-finite step is skipped (``update`` returns False)
  and the scale is multiplied by ``backoff`` (0.5); after ``growth_interval`` finite steps in a
  row it is multiplied by ``growth_factor`` (2), up to ``max_scale``. A non-finite step at
  ``min_scale`` raises ``NonFiniteLossError``, since skipping cannot help any more.

Scales stay powers of two when the settings are, so unscaling is exact in float16 too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from jit import ENABLED
from models.optim import _kernels
from models.optim.optimizer_base import StateDict, check_keys

logger = logging.getLogger(__name__)

LOSS_SCALE_KINDS = ("static", "dynamic")


class NonFiniteLossError(FloatingPointError):
    """Training produced a NaN/inf loss or gradient at ``step``; the message says what to try."""

    def __init__(self, step: int, loss: float, detail: str = "") -> None:
        self.step = step
        self.loss = loss
        msg = (
            f"non-finite loss or gradient at weight update {step} (loss={loss!r})"
            f"{'; ' + detail if detail else ''}. Try a lower learning rate (schedule.base_lr) or a "
            "longer warmup, or enable dynamic loss scaling (loss_scaling.kind='dynamic') so "
            "overflowing steps are skipped instead of stopping the run"
        )
        super().__init__(msg)


@dataclass(frozen=True)
class LossScaleConfig:
    """``kind='static'`` uses ``initial_scale`` throughout (1.0 disables scaling)."""

    kind: str = "static"
    initial_scale: float = 128.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 2.0**24

    def __post_init__(self) -> None:
        if self.kind not in LOSS_SCALE_KINDS:
            raise ValueError(f"loss_scaling.kind={self.kind!r} is not one of static, dynamic")
        if not (math.isfinite(self.initial_scale) and self.initial_scale > 0.0):
            raise ValueError(f"loss_scaling.initial_scale={self.initial_scale!r} must be a finite number > 0")
        if not self.growth_factor > 1.0:
            raise ValueError(f"loss_scaling.growth_factor={self.growth_factor!r} must be > 1")
        if not 0.0 < self.backoff_factor < 1.0:
            raise ValueError(f"loss_scaling.backoff_factor={self.backoff_factor!r} must be in (0, 1)")
        if self.growth_interval < 1:
            raise ValueError(f"loss_scaling.growth_interval={self.growth_interval!r} must be >= 1")
        if not 0.0 < self.min_scale <= self.initial_scale <= self.max_scale:
            raise ValueError(
                f"loss_scaling needs 0 < min_scale ({self.min_scale}) <= initial_scale "
                f"({self.initial_scale}) <= max_scale ({self.max_scale})"
            )


class LossScaler:
    """Holds the current scale; ``unscale_`` the gradients, then ``update`` with the verdict."""

    def __init__(self, cfg: LossScaleConfig) -> None:
        self.cfg = cfg
        self.scale = float(cfg.initial_scale)
        self.good_steps = 0
        self.skipped_steps = 0

    @property
    def dynamic(self) -> bool:
        return self.cfg.kind == "dynamic"

    def unscale_(self, grads: Sequence[np.ndarray], divisor: float = 1.0) -> bool:
        """Divide every gradient by the scale (and by ``divisor``, e.g. the micro-batches summed, in the
        same pass) in place; return True if all are finite."""
        inv = 1.0 / (divisor * self.scale)
        finite = True
        for g in grads:
            if ENABLED and g.dtype in (np.float32, np.float64) and g.flags.c_contiguous:
                finite &= bool(_kernels.scale_all_finite(g.reshape(-1), g.dtype.type(inv)))  # one pass
                continue
            if inv != 1.0:
                g *= inv
            finite = finite and all_finite(g)
        return finite

    def unscale_into(self, grads: np.ndarray, out: np.ndarray, divisor: float = 1.0) -> bool:
        """``out[:] = grads / (divisor * scale)``, ``grads`` left as it is: ``unscale_`` and a copy
        into ``out`` (say the float32 gradients of a float64 sum) in one pass, bitwise the same values.
        True if every quotient is finite, in ``grads``' precision."""
        if out.shape != grads.shape:
            raise ValueError(f"unscale_into: out has shape {out.shape}, the gradients {grads.shape}")
        inv = 1.0 / (divisor * self.scale)
        if (ENABLED and grads.dtype in (np.float32, np.float64) and out.dtype in (np.float32, np.float64)
                and grads.flags.c_contiguous and out.flags.c_contiguous):
            return bool(_kernels.scale_into_all_finite(grads.reshape(-1), grads.dtype.type(inv), out.reshape(-1)))
        scaled = grads * grads.dtype.type(inv) if inv != 1.0 else grads
        np.copyto(out, scaled, casting="same_kind")
        return all_finite(scaled)

    def update(self, finite: bool, *, step: int, loss: float = math.nan) -> bool:
        """Record whether weight update ``step`` was finite; return True to apply it."""
        if finite:
            self.good_steps += 1
            if self.dynamic and self.good_steps >= self.cfg.growth_interval:
                self.scale = min(self.scale * self.cfg.growth_factor, self.cfg.max_scale)
                self.good_steps = 0
            return True
        if not self.dynamic:
            raise NonFiniteLossError(step, loss, f"static loss scale {self.scale:g}")
        if self.scale <= self.cfg.min_scale:
            raise NonFiniteLossError(step, loss, f"dynamic loss scale already at its minimum {self.scale:g}")
        old = self.scale
        self.scale = max(self.scale * self.cfg.backoff_factor, self.cfg.min_scale)
        self.good_steps = 0
        self.skipped_steps += 1
        logger.warning(
            "Non-finite gradients at update %d (loss=%r): skipped, loss scale %g -> %g.", step, loss, old, self.scale
        )
        return False

    def state_dict(self) -> StateDict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, d: Mapping[str, object]) -> None:
        check_keys("LossScaler", {"scale", "good_steps", "skipped_steps"}, set(d))
        self.scale = float(np.asarray(d["scale"]))
        self.good_steps = int(np.asarray(d["good_steps"]))
        self.skipped_steps = int(np.asarray(d["skipped_steps"]))


def all_finite(x: np.ndarray) -> bool:
    """True if no element is NaN or +-inf, without allocating a mask (max/min propagate NaN)."""
    if x.size == 0:
        return True
    return math.isfinite(float(np.max(x))) and math.isfinite(float(np.min(x)))
