"""A class-dependent synthetic image generator for throughput runs and tests.

Each class owns a smooth pattern per channel (a product of two sinusoids with class-specific
frequencies and phases). A sample is its class pattern, randomly shifted by a few pixels, plus
Gaussian noise, clipped to uint8. A linear model separates the classes well above chance, a
convolutional one almost perfectly, at any resolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate: ``num_samples`` images of ``height x width x channels`` in ``num_classes``."""

    num_samples: int
    height: int
    width: int
    channels: int
    num_classes: int
    seed: int = 0
    noise: float = 40.0

    def __post_init__(self) -> None:
        for name in ("num_samples", "height", "width", "channels", "num_classes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"synthetic {name} must be positive, got {getattr(self, name)}")


def class_patterns(spec: SyntheticSpec) -> np.ndarray:
    """float32 [num_classes, H, W, C] patterns in [-1, 1]; depends on the class count and seed only."""
    rng = np.random.default_rng([spec.seed, 1])
    freq = rng.uniform(0.5, 3.5, size=(spec.num_classes, spec.channels, 2))
    phase = rng.uniform(0.0, 2 * np.pi, size=(spec.num_classes, spec.channels, 2))
    y = (np.arange(spec.height) + 0.5) / spec.height
    x = (np.arange(spec.width) + 0.5) / spec.width
    wave_y = np.sin(2 * np.pi * freq[..., 0, None] * y + phase[..., 0, None])  # [K, C, H]
    wave_x = np.cos(2 * np.pi * freq[..., 1, None] * x + phase[..., 1, None])  # [K, C, W]
    patterns = wave_y[:, :, :, None] * wave_x[:, :, None, :]                   # [K, C, H, W]
    return patterns.transpose(0, 2, 3, 1).astype(np.float32)


def synthetic_block(spec: SyntheticSpec, start: int, stop: int, split_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [stop-start, H, W, C] and labels int64 for rows ``[start, stop)``.

    Blocks are independent (seeded by the block start), so a converter can write any size
    block by block. Labels cycle through the classes so every class is balanced.
    """
    patterns = class_patterns(spec)
    rng = np.random.default_rng([spec.seed, split_seed, start])
    count = stop - start
    labels = (np.arange(start, stop, dtype=np.int64) * 7919) % spec.num_classes
    max_shift = max(1, min(spec.height, spec.width) // 8)
    dy, dx = rng.integers(-max_shift, max_shift + 1, size=(2, count))
    ys = (np.arange(spec.height)[None, :] - dy[:, None]) % spec.height  # np.roll by (dy, dx), per sample
    xs = (np.arange(spec.width)[None, :] - dx[:, None]) % spec.width
    shifted = patterns[labels[:, None, None], ys[:, :, None], xs[:, None, :]]
    noise = rng.standard_normal(shifted.shape, dtype=np.float32) * np.float32(spec.noise)
    images = np.clip(128.5 + 80.0 * shifted + noise, 0, 255).astype(np.uint8)
    return images, labels
