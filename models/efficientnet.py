"""EfficientNet B0-B7 (and small/G16/group-norm variants) in torchvision's layout.

Scaling follows Tan & Le (2019) as implemented by torchvision: channels ``round(c*width)`` to a
multiple of 8 (never more than 10 % down), repeats ``ceil(r*depth)``, head width 4x the last
block's, SE squeeze ``max(1, block_input // 4)``, drop-connect ``rate * i / num_blocks`` for
block i (from 0). G16 (Masters et al. 2021) replaces depthwise convs by group convs with 16
channels per group and expands by 4 instead of 6; see :func:`group_count` for channel counts
that are not a multiple of 16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from models.layer import Rng, Sequential
from models.conv_norm import NormSpec, conv_norm
from models.mbconv import BlockSpec, MBConv
from models.dense import Dense
from models.pool import Dropout, GlobalAvgPool

# name: (width, depth, resolution, dropout)
COEFFICIENTS = {
    "b0": (1.0, 1.0, 224, 0.2), "b1": (1.0, 1.1, 240, 0.2), "b2": (1.1, 1.2, 260, 0.3),
    "b3": (1.2, 1.4, 300, 0.3), "b4": (1.4, 1.8, 380, 0.4), "b5": (1.6, 2.2, 456, 0.4),
    "b6": (1.8, 2.6, 528, 0.5), "b7": (2.0, 3.1, 600, 0.5),
    "tiny": (0.25, 0.25, 32, 0.2),
}

# B0 stages: (expand, kernel, stride, in, out, repeats); SE ratio 0.25 everywhere.
BASE_STAGES = (
    (1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1),
)


def round_channels(channels: float, divisor: int = 8) -> int:
    """Nearest multiple of ``divisor`` (at least ``divisor``), bumped up if >10 % below."""
    rounded = max(divisor, int(channels + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * channels:
        rounded += divisor
    return rounded


def group_count(channels: int, group_size: int) -> int:
    """Groups of a block's k x k conv: ``channels`` when ``group_size`` is 1 (depthwise).

    Otherwise Graphcore's rule, ``max(channels // group_size, 1)`` (``conv2d_basic`` in their
    TF1 ``Models/efficientnet.py`` and ``group_conv`` in their PyTorch ``efficientnet.py``), and
    where that does not divide ``channels`` (their code then fails to build), the nearest divisor
    below it, so groups hold at least ``group_size`` channels. Among B0-B7 G16 this happens
    once: B6's block1a, 56 channels, 3 -> 2 groups of 28.
    """
    if group_size == 1:
        return channels
    groups = max(channels // group_size, 1)
    while channels % groups:
        groups -= 1
    return groups


def round_repeats(repeats: int, depth: float) -> int:
    return int(math.ceil(repeats * depth))


@dataclass(frozen=True)
class EfficientNetConfig:
    """Everything that defines an EfficientNet; derive variants with ``dataclasses.replace``.

    group_size: channels per group of the k x k convs (1 = depthwise, 16 = G16).
    expand_ratio: overrides the expansion of blocks whose table ratio is not 1 (G16 uses 4).
    padding: ``symmetric`` (PyTorch, ``(k-1)//2``) or ``same`` (TensorFlow).
    """

    width: float = 1.0
    depth: float = 1.0
    resolution: int = 224
    dropout: float = 0.2
    num_classes: int = 1000
    drop_connect: float = 0.2
    norm: NormSpec = field(default_factory=NormSpec)
    group_size: int = 1
    expand_ratio: float | None = None
    in_channels: int = 3
    padding: str = "symmetric"

    def __post_init__(self) -> None:
        for key in ("width", "depth"):
            if getattr(self, key) <= 0:
                raise ValueError(f"efficientnet {key} must be > 0, got {getattr(self, key)}")
        if self.num_classes < 1 or self.in_channels < 1 or self.resolution < 1:
            raise ValueError(f"efficientnet: num_classes, in_channels and resolution must be >= 1 "
                             f"(got {self.num_classes}, {self.in_channels}, {self.resolution})")
        if self.group_size < 1:
            raise ValueError(f"efficientnet group_size must be >= 1 (1 = depthwise), got {self.group_size}")
        if not 0 <= self.drop_connect < 1 or not 0 <= self.dropout < 1:
            raise ValueError(f"efficientnet dropout/drop_connect must be in [0, 1), got "
                             f"{self.dropout}/{self.drop_connect}")
        if self.padding not in ("symmetric", "same"):
            raise ValueError(f"efficientnet padding {self.padding!r}: use 'symmetric' or 'same'")

    @property
    def stem_channels(self) -> int:
        return round_channels(BASE_STAGES[0][3] * self.width)

    @property
    def head_channels(self) -> int:
        return 4 * round_channels(BASE_STAGES[-1][4] * self.width)


def block_specs(cfg: EfficientNetConfig) -> list[BlockSpec]:
    """The scaled block list, with torchvision prefixes and TF/Graphcore block names."""
    stages = []
    for expand, kernel, stride, cin, cout, repeats in BASE_STAGES:
        if cfg.expand_ratio is not None and expand != 1:
            expand = cfg.expand_ratio
        stages.append((expand, kernel, stride, round_channels(cin * cfg.width),
                       round_channels(cout * cfg.width), round_repeats(repeats, cfg.depth)))
    total = sum(s[5] for s in stages)
    specs, index = [], 0
    for stage, (expand, kernel, stride, cin, cout, repeats) in enumerate(stages):
        for j in range(repeats):
            bin_, bstride = (cin, stride) if j == 0 else (cout, 1)
            expanded = round_channels(bin_ * expand)
            groups = group_count(expanded, cfg.group_size)
            specs.append(BlockSpec(
                name=f"block{stage + 1}{_letters(j)}", prefix=f"features.{stage + 1}.{j}", cin=bin_, cout=cout,
                expanded=expanded, kernel=kernel, stride=bstride, groups=groups,
                squeeze=max(1, bin_ // 4), drop_prob=cfg.drop_connect * index / total))
            index += 1
    return specs


def _letters(j: int) -> str:
    return chr(ord("a") + j) if j < 26 else _letters(j // 26 - 1) + chr(ord("a") + j % 26)


def param_count(cfg: EfficientNetConfig) -> int:
    """Trainable parameters, counted from the block table (no arrays built)."""
    norm = 2  # scale + offset per channel, for batch and group norm alike

    def conv(cin, cout, k, groups):
        return cout * (cin // groups) * k * k + norm * cout

    total = conv(cfg.in_channels, cfg.stem_channels, 3, 1)
    for s in block_specs(cfg):
        if s.expanded != s.cin:
            total += conv(s.cin, s.expanded, 1, 1)
        total += conv(s.expanded, s.expanded, s.kernel, s.groups)
        total += 2 * s.expanded * s.squeeze + s.squeeze + s.expanded
        total += conv(s.expanded, s.cout, 1, 1)
    last = block_specs(cfg)[-1].cout
    total += conv(last, cfg.head_channels, 1, 1)
    return total + cfg.head_channels * cfg.num_classes + cfg.num_classes


def build_efficientnet(cfg: EfficientNetConfig, rng_holder: Rng, dtype=np.float32, seed: int = 0):
    """Named blocks ``[("stem", ...), ("block1a", ...), ..., ("head", ...)]``."""
    rng = np.random.default_rng(seed)
    pad = cfg.padding
    blocks = [("stem", conv_norm("features.0", "stem", cfg.in_channels, cfg.stem_channels, 3, 2, 1, cfg.norm,
                                 "silu", pad, dtype, rng))]
    specs = block_specs(cfg)
    for spec in specs:
        blocks.append((spec.name, MBConv(spec, cfg.norm, pad, rng_holder, dtype, rng)))
    head_index = len(BASE_STAGES) + 1
    head = Sequential("head", "head", [
        conv_norm(f"features.{head_index}", "head", specs[-1].cout, cfg.head_channels, 1, 1, 1, cfg.norm, "silu",
                  pad, dtype, rng),
        GlobalAvgPool("avgpool", "head", dtype),
        Dropout("classifier.0", "head", cfg.dropout, rng_holder, dtype),
        Dense("classifier.1", "head", cfg.head_channels, cfg.num_classes, True, dtype, rng,
              init_fan=cfg.num_classes, zero_bias=True),
    ], dtype)
    blocks.append(("head", head))
    return blocks
