"""The normalisation choice and torchvision's conv + norm (+ activation) unit, shared by the models.

``NormSpec`` says which norm follows every convolution (batch or group norm, its epsilon,
momentum and group count); ``conv_norm`` builds torchvision's ``Conv2dNormActivation``
(``<name>.0`` conv without bias, ``<name>.1`` norm with the activation fused into it).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.conv import Conv2d
from models.layer import Layer, Sequential
from models.norm import BatchNorm2d, GroupNorm


@dataclass(frozen=True)
class NormSpec:
    """Which normalisation every conv is followed by.

    kind: ``batch`` or ``group``; groups: group-norm groups, capped at the channel count
    (``min(C, groups)``, as Graphcore does; 1 = layer norm); eps; momentum: batch-norm
    running-statistics momentum in torch convention (TF's 0.99 is torch's 0.01).
    """

    kind: str = "batch"
    groups: int = 4
    eps: float = 1e-3
    momentum: float = 0.01

    def __post_init__(self) -> None:
        if self.kind not in ("batch", "group"):
            raise ValueError(f"norm {self.kind!r}: use 'batch' or 'group'")
        if self.groups < 1:
            raise ValueError(f"norm groups must be >= 1, got {self.groups}")

    def build(self, name: str, block: str, channels: int, act: str | None, dtype) -> Layer:
        if self.kind == "batch":
            return BatchNorm2d(name, block, channels, self.eps, self.momentum, act, dtype)
        groups = min(channels, self.groups)
        while channels % groups:  # fall back to the nearest divisor below
            groups -= 1
        return GroupNorm(name, block, channels, groups, self.eps, act, dtype)


def conv_norm(name: str, block: str, cin: int, cout: int, kernel: int, stride: int, groups: int,
              norm: NormSpec, act: str | None, padding, dtype, rng) -> Sequential:
    """torchvision's Conv2dNormActivation: ``<name>.0`` conv (no bias), ``<name>.1`` norm."""
    conv = Conv2d(f"{name}.0", block, cin, cout, kernel, stride, padding, groups, False, dtype, rng)
    return Sequential(name, block, [conv, norm.build(f"{name}.1", block, cout, act, dtype)], dtype)
