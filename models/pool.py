"""Max pooling, global average pooling, dropout and stochastic depth (drop-connect)."""

from __future__ import annotations

import numpy as np

from jit import prange
from models.kernels.threads import compiled_kernel
from models.layer import Layer, Rng, Shape


@compiled_kernel(parallel=True)
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


@compiled_kernel(parallel=True)
def broadcast_spatial(g, dx, scale):
    """dx[n, r, c] = g[n, c] * scale."""
    n_, m_, c_ = dx.shape
    for i in prange(n_ * m_):
        n = i // m_
        out = dx[n, i % m_]
        for c in range(c_):
            out[c] = g[n, c] * scale


@compiled_kernel(parallel=True)
def max_pool_forward(x, y, arg, k, s, pad):
    """y[n, i, j, c] = max of x over the k x k window at (i*s - pad, j*s - pad), ignoring padding;
    arg = the flat input position h*W + w of the first maximum in row-major order (torch's choice)."""
    n_, h_, w_, c_ = x.shape
    _, ho_, wo_, _ = y.shape
    for t in prange(n_ * ho_):
        n, i = t // ho_, t % ho_
        for j in range(wo_):
            out, where = y[n, i, j], arg[n, i, j]
            start = max(i * s - pad, 0) * w_ + max(j * s - pad, 0)
            for c in range(c_):
                out[c] = -np.inf
                where[c] = start
            for kh in range(k):
                h = i * s - pad + kh
                if h < 0 or h >= h_:
                    continue
                for kw in range(k):
                    w = j * s - pad + kw
                    if w < 0 or w >= w_:
                        continue
                    row = x[n, h, w]
                    for c in range(c_):
                        v = row[c]
                        if v > out[c] or v != v:  # a NaN wins, as in torch
                            out[c] = v
                            where[c] = h * w_ + w


@compiled_kernel(parallel=True)
def max_pool_backward(dy, arg, dx):
    """dx = 0, then dy scattered onto the positions in ``arg`` (overlapping windows add up)."""
    n_, ho_, wo_, c_ = dy.shape
    w_ = dx.shape[2]
    for n in prange(n_):
        dx[n] = 0.0
        for i in range(ho_):
            for j in range(wo_):
                g, where = dy[n, i, j], arg[n, i, j]
                for c in range(c_):
                    p = where[c]
                    dx[n, p // w_, p % w_, c] += g[c]


class MaxPool2d(Layer):
    """torch ``MaxPool2d(kernel, stride, padding)`` (floor mode) over NHWC; padding never wins.
    Keeps the position of each maximum (int32, one per output element)."""

    kind = "pool"

    def __init__(self, name: str, block: str, kernel: int, stride: int, padding: int = 0, dtype=np.float32) -> None:
        super().__init__(name, block, dtype)
        if kernel < 1 or stride < 1 or not 0 <= padding <= kernel // 2:
            raise ValueError(f"max pool {name}: need kernel >= 1, stride >= 1 and 0 <= padding <= kernel // 2 "
                             f"(as torch), got kernel={kernel}, stride={stride}, padding={padding}")
        self.k, self.s, self.pad = kernel, stride, padding

    def out_shape(self, shape: Shape) -> Shape:
        n, h, w, c = shape
        ho, wo = (h + 2 * self.pad - self.k) // self.s + 1, (w + 2 * self.pad - self.k) // self.s + 1
        if ho < 1 or wo < 1:
            raise ValueError(f"max pool {self.name}: input {h}x{w} is smaller than the {self.k}x{self.k} window")
        return n, ho, wo, c

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        out = self.out_shape(x.shape)
        y, arg = self._buf("y", out), self._buf("arg", out, np.int32)
        max_pool_forward(np.ascontiguousarray(x), y, arg, self.k, self.s, self.pad)
        self.x_shape, self.arg = x.shape, arg
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dx = self._grad_buf(self.x_shape)
        max_pool_backward(np.ascontiguousarray(dy), self.arg, dx)
        return dx

    def profile(self, shape: Shape):
        e = int(np.prod(self.out_shape(shape)))
        return [self._record(shape, self.k * self.k * e, e, e)]


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
