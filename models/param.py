"""A trainable parameter: its value, its gradient and how optimizers should treat it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Param:
    """One trainable tensor.

    name: the key under which it appears in the model's state_dict (torchvision naming,
        for example ``features.0.1.weight``); optimizer state is keyed by it too.
    data: the value, float32 (float64 in gradient checks); optimizers update it in place.
    grad: same shape and dtype; layers *write* (not add) it in ``backward``; the engine
        accumulates across micro-batches and replicas in its own buffers.
    kind: ``weight`` (conv or dense kernel), ``bias``, ``norm_scale`` or ``norm_offset``.
        LARS and weight decay skip everything but ``weight`` (the TF rule skips names with
        beta/gamma/bias).
    """

    name: str
    data: np.ndarray
    kind: str = "weight"
    grad: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in ("weight", "bias", "norm_scale", "norm_offset"):
            raise ValueError(f"parameter {self.name!r}: unknown kind {self.kind!r}")
        self.grad = np.zeros_like(self.data)

    @property
    def decays(self) -> bool:
        """Whether weight decay and the LARS trust ratio apply to this parameter."""
        return self.kind == "weight"
