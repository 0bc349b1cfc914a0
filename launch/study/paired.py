"""Paired comparisons on the same test images: per-image predictions, a paired bootstrap, McNemar per seed.

Every fresh-seed row stores its predicted class for each test image (``test_predictions``: the classes as
``uint8``, or ``uint16`` past 256 classes, base64 in the row; :func:`encode`, :func:`decode`). Against
the test labels that gives a 0/1 correctness matrix per arm, seeds x images. Welch's interval over seeds
treats the test set as fixed; these two see it as a sample of images:

* :func:`paired_bootstrap`: each replicate draws the images with replacement (the same draw for both
  arms: the pairing) and each arm's seeds with replacement, and takes the difference of the two mean
  accuracies; the interval is the replicates' percentiles. It carries both the seeds' and the
  images' variation.
* :func:`mcnemar`: for one seed of each arm, the images one gets right and the other wrong (``b``) and the
  reverse (``c``); the exact two-sided binomial test of ``b`` against ``b + c`` at one half.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass

import numpy as np


def encode(predicted: np.ndarray) -> dict:
    """``{"dtype", "count", "base64"}`` of an array of predicted classes (the smallest unsigned type that holds them)."""
    predicted = np.asarray(predicted)
    if predicted.ndim != 1 or (predicted.size and predicted.min() < 0):
        raise ValueError(f"predictions must be one non-negative class per image, got shape {predicted.shape} and "
                         f"minimum {predicted.min() if predicted.size else None}")
    dtype = np.uint8 if not predicted.size or predicted.max() < 256 else np.uint16
    data = predicted.astype(np.dtype(dtype).newbyteorder("<"))
    return {"dtype": np.dtype(dtype).name, "count": int(predicted.size), "base64": base64.b64encode(data.tobytes()).decode()}


def decode(stored: dict) -> np.ndarray:
    """The predicted classes of :func:`encode`'s record."""
    if stored.get("dtype") not in ("uint8", "uint16"):
        raise ValueError(f"test_predictions dtype {stored.get('dtype')!r}: uint8 or uint16")
    out = np.frombuffer(base64.b64decode(stored["base64"]), np.dtype(stored["dtype"]).newbyteorder("<"))
    if out.size != stored["count"]:
        raise ValueError(f"test_predictions hold {out.size} classes, the record says {stored['count']}")
    return out.astype(np.int64)


@dataclass(frozen=True)
class PairedInterval:
    mean: float  # the observed difference of mean accuracies (fraction)
    low: float
    high: float
    level: float
    replicates: int


def paired_bootstrap(correct_a: np.ndarray, correct_b: np.ndarray, level: float = 0.95, replicates: int = 4000,
                     seed: int = 0, chunk: int = 250) -> PairedInterval:
    """The paired bootstrap interval of ``mean(correct_a) - mean(correct_b)``: 0/1 matrices seeds x images,
    the same images in the same order in both."""
    a, b = np.asarray(correct_a, np.float64), np.asarray(correct_b, np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or not a.size or not b.size:
        raise ValueError(f"paired bootstrap of shapes {a.shape} and {b.shape}: seeds x images, the same images in both")
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    out = np.empty(replicates)
    for start in range(0, replicates, chunk):
        k = min(chunk, replicates - start)
        images = rng.multinomial(n, np.full(n, 1.0 / n), size=k) / n  # k x images: each image's weight
        wa = rng.multinomial(a.shape[0], np.full(a.shape[0], 1.0 / a.shape[0]), size=k) / a.shape[0]
        wb = rng.multinomial(b.shape[0], np.full(b.shape[0], 1.0 / b.shape[0]), size=k) / b.shape[0]
        out[start:start + k] = np.einsum("ks,sn,kn->k", wa, a, images) - np.einsum("ks,sn,kn->k", wb, b, images)
    tail = 0.5 * (1.0 - level)
    low, high = np.quantile(out, [tail, 1.0 - tail], method="inverted_cdf")
    return PairedInterval(float(a.mean() - b.mean()), float(low), float(high), level, replicates)


def mcnemar(correct_a: np.ndarray, correct_b: np.ndarray) -> tuple[int, int, float]:
    """(b, c, p): images only ``a`` gets right, images only ``b`` gets right, and the exact two-sided
    binomial p-value of ``b`` in ``b + c`` at one half."""
    x, y = np.asarray(correct_a, bool), np.asarray(correct_b, bool)
    if x.shape != y.shape:
        raise ValueError(f"McNemar of shapes {x.shape} and {y.shape}: one seed's images, the same in both")
    b, c = int(np.count_nonzero(x & ~y)), int(np.count_nonzero(~x & y))
    n = b + c
    if n == 0:
        return b, c, 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return b, c, min(1.0, 2.0 * tail / 2 ** n)


__all__ = ["PairedInterval", "decode", "encode", "mcnemar", "paired_bootstrap"]
