"""Sample mixing on the device side: mixup, cutmix and the cross-entropy of a mixed target.

A mixed target is a list of ``(weight, labels)`` terms; the loss is linear in the target, so its
value and gradient are the weighted sums of plain cross-entropies over the terms.
"""

from __future__ import annotations

import numpy as np

from models.loss import softmax_cross_entropy

Targets = list[tuple[float, np.ndarray]]  # (weight, labels) terms of a mixed target


def mixed_cross_entropy(logits: np.ndarray, targets: Targets, label_smoothing: float) -> tuple[float, np.ndarray]:
    """Cross-entropy against a weighted sum of label sets: linear in the target, so the loss and
    its gradient are the weighted sums of ``softmax_cross_entropy`` over the terms."""
    total, grad = 0.0, None
    for weight, labels in targets:
        loss, d = softmax_cross_entropy(logits, labels, label_smoothing)
        total += weight * loss
        if grad is None:
            grad = d * np.asarray(weight, d.dtype)
        else:
            grad += d * np.asarray(weight, d.dtype)
    return total, grad


def mixup(x: np.ndarray, targets: Targets, rng: np.random.Generator, alpha: float) -> tuple[np.ndarray, Targets]:
    """``lam * x + (1 - lam) * x[perm]`` with lam ~ Beta(alpha, alpha) (Zhang et al. 2018)."""
    lam = float(rng.beta(alpha, alpha))
    perm = rng.permutation(len(x))
    mixed = x * np.asarray(lam, x.dtype)
    mixed += x[perm] * np.asarray(1.0 - lam, x.dtype)
    return mixed, [(w * lam, y) for w, y in targets] + [(w * (1.0 - lam), y[perm]) for w, y in targets]


def cutmix(x: np.ndarray, targets: Targets, rng: np.random.Generator, keep: float) -> tuple[np.ndarray, Targets]:
    """Paste a box of ``1 - keep`` of the area from ``x[perm]`` (Yun et al. 2019, fixed lambda as in
    Graphcore's ``cutmix_lambda``); label weights follow the area actually kept after clipping."""
    n, h, w = x.shape[:3]
    perm = rng.permutation(n)
    cut_h, cut_w = int(round(h * np.sqrt(1.0 - keep))), int(round(w * np.sqrt(1.0 - keep)))
    cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
    y0, y1 = max(cy - cut_h // 2, 0), min(cy + (cut_h + 1) // 2, h)
    x0, x1 = max(cx - cut_w // 2, 0), min(cx + (cut_w + 1) // 2, w)
    kept = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)
    out = x.copy()
    out[:, y0:y1, x0:x1] = x[perm, y0:y1, x0:x1]
    return out, [(wt * kept, y) for wt, y in targets] + [(wt * (1.0 - kept), y[perm]) for wt, y in targets]
