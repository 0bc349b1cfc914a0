"""Softmax cross-entropy with label smoothing (PyTorch ``cross_entropy`` semantics)."""

from __future__ import annotations

import numpy as np


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray,
                          label_smoothing: float = 0.0) -> tuple[float, np.ndarray]:
    """Mean loss over the batch and its gradient with respect to the logits.

    The target distribution is ``(1 - eps) * one_hot + eps / K``, so the loss is
    ``(1 - eps) * nll(label) + eps * mean_k(nll(k))`` as in ``torch.nn.functional.cross_entropy``.
    Computed in float64 (log-sum-exp shifted by the row maximum); ``dlogits`` has the logits'
    dtype and already includes the 1/N of the mean.
    """
    if logits.ndim != 2:
        raise ValueError(f"softmax_cross_entropy: logits must be [N, classes], got shape {logits.shape}")
    n, k = logits.shape
    labels = np.asarray(labels)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"softmax_cross_entropy: labels must be {n} integers, got {labels.dtype} {labels.shape}")
    if n and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"softmax_cross_entropy: labels must be in [0, {k}), got range "
                         f"[{labels.min()}, {labels.max()}]")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"softmax_cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1, keepdims=True))
    logp = z - lse
    target = np.full((n, k), label_smoothing / k)
    target[np.arange(n), labels] += 1.0 - label_smoothing
    loss = float(-(target * logp).sum() / n)
    dlogits = ((np.exp(logp) - target) / n).astype(logits.dtype)
    return loss, dlogits
