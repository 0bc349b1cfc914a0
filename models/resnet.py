"""ResNet-18/34/50/101/152 (v1.5) in torchvision's layout, with batch or group norm.

torchvision's ``resnet.py``: ``conv1`` 7x7 stride 2 -> ``bn1`` + ReLU -> ``maxpool`` 3x3 stride 2,
four stages ``layer1``..``layer4`` of residual blocks (widths 64, 128, 256, 512 times ``width/64``;
the first block of stages 2-4 has stride 2, in the 3x3 conv of a bottleneck: "v1.5"), then
``avgpool`` and ``fc``. Initialisation as torchvision: convs Kaiming-normal (fan-out), norms
scale 1 offset 0, ``fc`` torch's ``Linear`` default. ResNet-50 has 25,557,032 parameters.

Blocks (pipeline split points) are named like the state_dict prefixes: ``stem``, ``layer1.0``,
..., ``layer4.2``, ``head`` (Graphcore's PyTorch configs write ``layer1/0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.conv import Conv2d
from models.conv_norm import NormSpec
from models.dense import Dense
from models.layer import Layer, Sequential
from models.pool import GlobalAvgPool, MaxPool2d
from models.residual import ResidualBlock, ResidualSpec

# name: (blocks per stage, bottleneck)
ARCHITECTURES = {
    "resnet18": ((2, 2, 2, 2), False), "resnet34": ((3, 4, 6, 3), False), "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True), "resnet152": ((3, 8, 36, 3), True),
}


def _default_norm() -> NormSpec:
    return NormSpec(kind="batch", groups=32, eps=1e-5, momentum=0.1)  # torch's BatchNorm2d defaults


@dataclass(frozen=True)
class ResNetConfig:
    """Everything that defines a ResNet; derive variants with ``dataclasses.replace``.

    layers: residual blocks per stage; bottleneck: 3-conv blocks with 4x expansion (ResNet-50 and
    deeper) or 2-conv basic blocks; width: the stem's and first stage's channels (64 in every
    torchvision ResNet; smaller for tests); norm: batch norm with torch's defaults (epsilon 1e-5,
    momentum 0.1), or group norm with 32 groups (Wu & He 2018) under ``-gn``.
    """

    layers: tuple[int, ...] = (3, 4, 6, 3)
    bottleneck: bool = True
    width: int = 64
    resolution: int = 224
    num_classes: int = 1000
    in_channels: int = 3
    norm: NormSpec = field(default_factory=_default_norm)

    def __post_init__(self) -> None:
        if len(self.layers) != 4 or min(self.layers) < 1:
            raise ValueError(f"resnet layers {self.layers!r}: need 4 stages of at least one block each, "
                             f"e.g. (3, 4, 6, 3)")
        if self.width < 1 or self.num_classes < 1 or self.in_channels < 1 or self.resolution < 1:
            raise ValueError(f"resnet: width, num_classes, in_channels and resolution must be >= 1 (got "
                             f"{self.width}, {self.num_classes}, {self.in_channels}, {self.resolution})")

    @property
    def head_channels(self) -> int:
        return residual_specs(self)[-1].cout


def residual_specs(cfg: ResNetConfig) -> list[ResidualSpec]:
    """The residual blocks in order, named ``layer<stage>.<index>``."""
    specs, cin = [], cfg.width
    for stage, blocks in enumerate(cfg.layers):
        width = cfg.width * 2**stage
        for j in range(blocks):
            spec = ResidualSpec(f"layer{stage + 1}.{j}", cin, width, 2 if (j == 0 and stage > 0) else 1,
                                cfg.bottleneck)
            specs.append(spec)
            cin = spec.cout
    return specs


def resnet_param_count(cfg: ResNetConfig) -> int:
    """Trainable parameters, counted from the block table (no arrays built)."""
    stem = cfg.in_channels * cfg.width * 49 + 2 * cfg.width
    blocks = sum(spec.param_count() for spec in residual_specs(cfg))
    return stem + blocks + cfg.head_channels * cfg.num_classes + cfg.num_classes


def build_resnet(cfg: ResNetConfig, dtype=np.float32, seed: int = 0) -> list[tuple[str, Layer]]:
    """Named blocks ``[("stem", ...), ("layer1.0", ...), ..., ("head", ...)]``."""
    rng = np.random.default_rng(seed)
    stem = Sequential("stem", "stem", [
        Conv2d("conv1", "stem", cfg.in_channels, cfg.width, 7, 2, 3, 1, False, dtype, rng),
        cfg.norm.build("bn1", "stem", cfg.width, "relu", dtype),
        MaxPool2d("maxpool", "stem", 3, 2, 1, dtype),
    ], dtype)
    blocks: list[tuple[str, Layer]] = [("stem", stem)]
    blocks += [(spec.name, ResidualBlock(spec, cfg.norm, dtype, rng)) for spec in residual_specs(cfg)]
    head = Sequential("head", "head", [
        GlobalAvgPool("avgpool", "head", dtype),
        Dense("fc", "head", cfg.head_channels, cfg.num_classes, True, dtype, rng),
    ], dtype)
    blocks.append(("head", head))
    return blocks
