"""Global average pooling, dropout and stochastic depth (drop-connect)."""

from __future__ import annotations

import numpy as np

from models._jit import jit, prange
from models.layer import Layer, Rng, Shape


@jit(parallel=True)
def spatial_mean(x, out):
    """out[n, c] = mean over HW of x [N, HW, C], float64 accumulation."""
    n_, m_, c_ = x.shape
    for n in prange(n_):
        acc = np.zeros(c_)
        for r in range(m_):
            row = x[n, r]
            for c in range(c_):
                acc[c] += row[c]
        for c in range(c_):
            out[n, c] = acc[c] / m_


@jit(parallel=True)
def broadcast_spatial(g, dx, scale):
    """dx[n, r, c] = g[n, c] * scale."""
    n_, m_, c_ = dx.shape
    for i in prange(n_ * m_):
        n = i // m_
        out = dx[n, i % m_]
        for c in range(c_):
            out[c] = g[n, c] * scale


class GlobalAvgPool(Layer):
    """NHWC -> [N, C] mean over H and W. Keeps only the input shape."""

    kind = "pool"

    def out_shape(self, shape: Shape) -> Shape:
        return shape[0], shape[3]

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        self.x_shape = x.shape
        y = self._buf("y", (x.shape[0], x.shape[3]))
        spatial_mean(x.reshape(x.shape[0], -1, x.shape[3]), y)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        n, h, w, c = self.x_shape
        dx = self._grad_buf(self.x_shape)
        broadcast_spatial(np.ascontiguousarray(dy), dx.reshape(n, -1, c), 1.0 / (h * w))
        return dx

    def profile(self, shape: Shape):
        return [self._record(shape, int(np.prod(shape)), int(np.prod(shape)), 0)]


class Dropout(Layer):
    """Inverted dropout: zero with probability p, scale survivors by 1/(1-p), training only.
    Keeps the scaled mask."""

    kind = "dropout"

    def __init__(self, name: str, block: str, p: float, rng: Rng, dtype=np.float32) -> None:
        super().__init__(name, block, dtype)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout {name}: probability must be in [0, 1), got {p}")
        self.p, self.rng = float(p), rng

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        self.active = training and self.p > 0
        if not self.active:
            return x
        mask = self._buf("mask", x.shape)
        mask[...] = self.rng.gen.random(x.shape) >= self.p
        mask *= 1.0 / (1.0 - self.p)
        y = self._buf("y", x.shape)
        np.multiply(x, mask, out=y)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        if not self.active:
            return dy
        dx = self._grad_buf(dy.shape)
        np.multiply(dy, self._scratch["mask"], out=dx)
        return dx

    def profile(self, shape: Shape):
        e = int(np.prod(shape))
        return [self._record(shape, e, e, e if self.p > 0 else 0)]


def drop_path_scale(rng: Rng, n: int, p: float, dtype) -> np.ndarray:
    """Per-sample stochastic-depth factors (torchvision ``StochasticDepth(p, "row")``):
    0 with probability p, else 1/(1-p)."""
    keep = rng.gen.random(n) >= p
    return (keep / (1.0 - p)).astype(dtype)
