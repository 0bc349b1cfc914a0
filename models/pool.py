"""Max and average pooling (torch's: any kernel, stride and padding, floor or ceil mode), global average
pooling, dropout and stochastic depth (drop-connect)."""

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
def max_pool_forward(x, y, arg, kh_, kw_, sh, sw, pt, pl):
    """y[n, i, j, c] = max of x over the kh x kw window at (i*sh - pt, j*sw - pl), ignoring padding;
    arg = the flat input position h*W + w of the first maximum in row-major order (torch's choice)."""
    n_, h_, w_, c_ = x.shape
    _, ho_, wo_, _ = y.shape
    for t in prange(n_ * ho_):
        n, i = t // ho_, t % ho_
        for j in range(wo_):
            out, where = y[n, i, j], arg[n, i, j]
            start = max(i * sh - pt, 0) * w_ + max(j * sw - pl, 0)
            for c in range(c_):
                out[c] = -np.inf
                where[c] = start
            for kh in range(kh_):
                h = i * sh - pt + kh
                if h < 0 or h >= h_:
                    continue
                for kw in range(kw_):
                    w = j * sw - pl + kw
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


def pool_size(size: int, k: int, s: int, before: int, after: int, ceil: bool) -> int:
    """torch's pooled size: floor or ceil of (size + pads - k) / s, plus one; in ceil mode the last window
    must start inside the image or its leading padding."""
    span = size + before + after - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + before:
        out -= 1
    return out


class _Window(Layer):
    """A pooling window: ``kernel`` and ``stride`` (an int or (h, w)), ``padding`` (an int or (top, bottom,
    left, right), each at most half the kernel, as torch) and ``ceil_mode``."""

    kind = "pool"

    def __init__(self, name, block, kernel, stride, padding, ceil_mode, dtype) -> None:
        super().__init__(name, block, dtype)
        self.kh, self.kw = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
        self.sh, self.sw = (stride, stride) if isinstance(stride, int) else tuple(stride)
        self.pads = (padding,) * 4 if isinstance(padding, int) else tuple(int(p) for p in padding)
        pt, pb, pl, pr = self.pads
        if min(self.kh, self.kw, self.sh, self.sw) < 1 or len(self.pads) != 4 or min(self.pads) < 0 \
                or max(pt, pb) > self.kh // 2 or max(pl, pr) > self.kw // 2:
            raise ValueError(f"{self.what} {name}: need kernel >= 1, stride >= 1 and 0 <= padding <= kernel // 2 "
                             f"(as torch), got kernel={kernel}, stride={stride}, padding={padding}")
        self.ceil_mode = bool(ceil_mode)

    def out_shape(self, shape: Shape) -> Shape:
        n, h, w, c = shape
        pt, pb, pl, pr = self.pads
        ho = pool_size(h, self.kh, self.sh, pt, pb, self.ceil_mode)
        wo = pool_size(w, self.kw, self.sw, pl, pr, self.ceil_mode)
        if ho < 1 or wo < 1:
            raise ValueError(f"{self.what} {self.name}: input {h}x{w} is smaller than the {self.kh}x{self.kw} window")
        return n, ho, wo, c

    def profile(self, shape: Shape):
        e = int(np.prod(self.out_shape(shape)))
        return [self._record(shape, self.kh * self.kw * e, e, e)]


class MaxPool2d(_Window):
    """torch ``MaxPool2d(kernel, stride, padding, ceil_mode=...)`` over NHWC; padding never wins.
    Keeps the position of each maximum (int32, one per output element)."""

    what = "max pool"

    def __init__(self, name: str, block: str, kernel, stride, padding=0, dtype=np.float32,
                 ceil_mode: bool = False) -> None:
        super().__init__(name, block, kernel, stride, padding, ceil_mode, dtype)

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        out = self.out_shape(x.shape)
        y, arg = self._buf("y", out), self._buf("arg", out, np.int32)
        max_pool_forward(np.ascontiguousarray(x), y, arg, self.kh, self.kw, self.sh, self.sw, self.pads[0],
                         self.pads[2])
        self.x_shape, self.arg = x.shape, arg
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dx = self._grad_buf(self.x_shape)
        max_pool_backward(np.ascontiguousarray(dy), self.arg, dx)
        return dx


def _counts(size: int, out: int, k: int, s: int, before: int, after: int, include_pad: bool) -> np.ndarray:
    """Per output position along one axis, the window's rows that torch divides by: those inside the image, or
    (``include_pad``) inside the image and its padding (not the extra rows of ceil mode)."""
    start = np.arange(out) * s - before
    end = np.minimum(start + k, size + after)
    if include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


class AvgPool2d(_Window):
    """torch ``AvgPool2d(kernel, stride, padding, ceil_mode, count_include_pad)`` over NHWC: each window's sum
    (zero padding) divided by its size, counting the padding or not; the extra rows and columns of ceil mode
    never count. One strided add per kernel tap over the (padded) input, forward and backward. Keeps the input's
    shape and the divisors."""

    what = "average pool"

    def __init__(self, name: str, block: str, kernel, stride, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, dtype=np.float32) -> None:
        super().__init__(name, block, kernel, stride, padding, ceil_mode, dtype)
        self.count_include_pad = bool(count_include_pad)

    def _geometry(self, shape: Shape):
        """The padded extent (rows, columns) the windows read, and the divisors [Ho, Wo, 1]."""
        _, h, w, _ = shape
        _, ho, wo, _ = self.out_shape(shape)
        pt, pb, pl, pr = self.pads
        rows = _counts(h, ho, self.kh, self.sh, pt, pb, self.count_include_pad)
        cols = _counts(w, wo, self.kw, self.sw, pl, pr, self.count_include_pad)
        extent = (max((ho - 1) * self.sh + self.kh, pt + h), max((wo - 1) * self.sw + self.kw, pl + w))
        return extent, (rows[:, None] * cols[None, :])[:, :, None].astype(self.dtype)

    def _taps(self, a: np.ndarray, ho: int, wo: int):
        for i in range(self.kh):
            for j in range(self.kw):
                yield a[:, i:i + (ho - 1) * self.sh + 1:self.sh, j:j + (wo - 1) * self.sw + 1:self.sw]

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        n, ho, wo, c = self.out_shape(x.shape)
        (hp, wp), self.div = self._geometry(x.shape)
        pt, _, pl, _ = self.pads
        xp = x
        if (hp, wp, pt, pl) != x.shape[1:3] + (0, 0):
            xp = self._buf("padded", (n, hp, wp, c))
            xp[...] = 0
            xp[:, pt:pt + x.shape[1], pl:pl + x.shape[2]] = x
        y = self._buf("y", (n, ho, wo, c))
        y[...] = 0
        for tap in self._taps(xp, ho, wo):
            y += tap
        y /= self.div
        self.x_shape = x.shape
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        n, h, w, c = self.x_shape
        _, ho, wo, _ = dy.shape
        (hp, wp), _ = self._geometry(self.x_shape)
        pt, _, pl, _ = self.pads
        g = dy / self.div
        dxp = self._buf("padded", (n, hp, wp, c))
        dxp[...] = 0
        for tap in self._taps(dxp, ho, wo):
            tap += g
        dx = self._grad_buf(self.x_shape)
        np.copyto(dx, dxp[:, pt:pt + h, pl:pl + w])
        return dx


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
