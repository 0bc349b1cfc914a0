"""Host augmentation on uint8 batches: random-resized crop and horizontal flip, in numba.

Randomness never comes from a worker's stream: every sample's crop box and flip are a pure
function of ``(seed, epoch, sample id)`` (:func:`augment_params`), so the same sample gets the
same augmentation whichever instance or thread loads it. Kernels write into a preallocated
``dst`` and release the GIL.

The crop follows torchvision's ``RandomResizedCrop`` sampling (10 tries at a random area fraction
in ``scale`` and log-uniform aspect ratio in ``ratio``, then a centre-crop fallback) and resizes
bilinearly with half-pixel centres (``align_corners=False``, no antialias), rounding to nearest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from data.sharding import hash3, uniform
from jit import jit

_FLIP_COUNTER = 1000


@dataclass(frozen=True)
class AugmentConfig:
    """Random-resized crop + flip settings. ``out_size=None`` keeps the stored height and width."""

    out_size: tuple[int, int] | None = None
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    flip: bool = True

    def __post_init__(self) -> None:
        lo, hi = self.scale
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"augment scale must satisfy 0 < lo <= hi <= 1, got {self.scale}")
        if not 0.0 < self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"augment ratio must satisfy 0 < lo <= hi, got {self.ratio}")
        if self.out_size is not None and min(self.out_size) <= 0:
            raise ValueError(f"augment out_size must be positive, got {self.out_size}")


@jit
def _sample_box(key, height, width, scale_lo, scale_hi, log_lo, log_hi):
    area = height * width
    for attempt in range(10):
        target = area * (scale_lo + (scale_hi - scale_lo) * uniform(key, 4 * attempt))
        aspect = math.exp(log_lo + (log_hi - log_lo) * uniform(key, 4 * attempt + 1))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            y0 = int(uniform(key, 4 * attempt + 2) * (height - h + 1))
            x0 = int(uniform(key, 4 * attempt + 3) * (width - w + 1))
            return y0, x0, h, w
    in_ratio = width / height
    if in_ratio < math.exp(log_lo):
        w, h = width, int(round(width / math.exp(log_lo)))
    elif in_ratio > math.exp(log_hi):
        h, w = height, int(round(height * math.exp(log_hi)))
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


@jit
def _params_kernel(sample_ids, seed, epoch, height, width, scale_lo, scale_hi, log_lo, log_hi, flip, boxes, flips):
    for i in range(sample_ids.shape[0]):
        key = hash3(seed, epoch, sample_ids[i])
        y0, x0, h, w = _sample_box(key, height, width, scale_lo, scale_hi, log_lo, log_hi)
        boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3] = y0, x0, h, w
        flips[i] = flip and uniform(key, _FLIP_COUNTER) < 0.5


def augment_params(sample_ids: np.ndarray, seed: int, epoch: int, image_hw: tuple[int, int],
                   config: AugmentConfig) -> tuple[np.ndarray, np.ndarray]:
    """Crop boxes int64 [B, 4] as (y0, x0, h, w) and flips bool [B] for ``sample_ids``."""
    ids = np.ascontiguousarray(sample_ids, dtype=np.int64)
    boxes = np.empty((len(ids), 4), np.int64)
    flips = np.empty(len(ids), np.bool_)
    _params_kernel(ids, int(seed), int(epoch), int(image_hw[0]), int(image_hw[1]), float(config.scale[0]),
                   float(config.scale[1]), math.log(config.ratio[0]), math.log(config.ratio[1]),
                   bool(config.flip), boxes, flips)
    return boxes, flips


@jit
def _axis_taps(start, length, out_len):
    """Source index pairs and weights for one axis of a half-pixel bilinear resize."""
    lo = np.empty(out_len, np.int64)
    hi = np.empty(out_len, np.int64)
    weight = np.empty(out_len, np.float64)
    scale = length / out_len
    for o in range(out_len):
        pos = max((o + 0.5) * scale - 0.5, 0.0)
        i = min(int(pos), length - 1)
        lo[o] = start + i
        hi[o] = start + min(i + 1, length - 1)
        weight[o] = pos - i if i < length - 1 else 0.0
    return lo, hi, weight


@jit
def resized_crop(src, rows, boxes, flips, dst, round_offset):
    """``dst[i] = resize(crop(src[rows[i]], boxes[i]))``, mirrored where ``flips[i]``.

    ``src`` [N, H, W, C] is any numeric dtype; ``round_offset`` is 0.5 for integer ``dst`` (round to
    nearest) and 0.0 for float ``dst``.
    """
    out_h, out_w, channels = dst.shape[1], dst.shape[2], dst.shape[3]
    for i in range(rows.shape[0]):
        image = src[rows[i]]
        y_lo, y_hi, wy = _axis_taps(boxes[i, 0], boxes[i, 2], out_h)
        x_lo, x_hi, wx = _axis_taps(boxes[i, 1], boxes[i, 3], out_w)
        for oy in range(out_h):
            a, b, fy = y_lo[oy], y_hi[oy], wy[oy]
            for ox in range(out_w):
                c0, c1, fx = x_lo[ox], x_hi[ox], wx[ox]
                tx = out_w - 1 - ox if flips[i] else ox
                for c in range(channels):
                    top = image[a, c0, c] * (1.0 - fx) + image[a, c1, c] * fx
                    bottom = image[b, c0, c] * (1.0 - fx) + image[b, c1, c] * fx
                    dst[i, oy, tx, c] = top * (1.0 - fy) + bottom * fy + round_offset


def augment_batch(src: np.ndarray, rows: np.ndarray, sample_ids: np.ndarray, seed: int, epoch: int,
                  config: AugmentConfig, dst: np.ndarray) -> None:
    """Random-resized crop + flip of ``src[rows]`` into ``dst``, random state from (seed, epoch, sample id)."""
    boxes, flips = augment_params(sample_ids, seed, epoch, src.shape[1:3], config)
    offset = 0.5 if np.issubdtype(dst.dtype, np.integer) else 0.0
    resized_crop(src, np.ascontiguousarray(rows, dtype=np.int64), boxes, flips, dst, offset)
