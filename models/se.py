"""Squeeze-and-excitation: y = x * sigmoid(fc2(silu(fc1(mean_hw(x))))).

Parameters follow torchvision's ``SqueezeExcitation`` (``fc1``/``fc2`` are 1x1 convs with
bias, OIHW ``[S, C, 1, 1]`` and ``[C, S, 1, 1]``). Keeps: the input x, the pooled vector,
the squeeze pre-activation and the gate.
"""

from __future__ import annotations

import math

import numpy as np

from jit import prange
from models.kernels.threads import compiled_kernel
from models.layer import ConsumesGradient, Layer, Shape
from models.param import Param
from models.pool import spatial_mean


def _sigmoid(z: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(z.dtype)


@compiled_kernel(parallel=True)
def _scale(x, s, y):
    n_, m_, c_ = x.shape
    for i in prange(n_ * m_):
        n = i // m_
        row, out, sn = x[n, i % m_], y[n, i % m_], s[n]
        for c in range(c_):
            out[c] = row[c] * sn[c]


@compiled_kernel(parallel=True)
def _gate_grad(x, dy, ds):
    """ds[n, c] = sum over HW of dy * x (float64 accumulation)."""
    n_, m_, c_ = x.shape
    for n in prange(n_):
        acc = np.zeros(c_)
        for r in range(m_):
            xr, gr = x[n, r], dy[n, r]
            for c in range(c_):
                acc[c] += xr[c] * gr[c]
        for c in range(c_):
            ds[n, c] = acc[c]


@compiled_kernel(parallel=True)
def _input_grad(dy, s, dpool, dx, inv_m):
    n_, m_, c_ = dy.shape
    for i in prange(n_ * m_):
        n = i // m_
        gr, out, sn, dp = dy[n, i % m_], dx[n, i % m_], s[n], dpool[n]
        for c in range(c_):
            out[c] = gr[c] * sn[c] + dp[c] * inv_m


class SqueezeExcitation(ConsumesGradient, Layer):
    kind = "se"
    output_private = True

    def __init__(self, name: str, block: str, channels: int, squeeze: int, dtype=np.float32,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(name, block, dtype)
        self.c, self.s = channels, squeeze
        rng = rng or np.random.default_rng(0)
        w1 = rng.standard_normal((squeeze, channels, 1, 1)) * math.sqrt(2.0 / squeeze)
        w2 = rng.standard_normal((channels, squeeze, 1, 1)) * math.sqrt(2.0 / channels)
        self.w1 = Param(self._key("fc1.weight"), w1.astype(self.dtype))
        self.b1 = Param(self._key("fc1.bias"), np.zeros(squeeze, self.dtype), "bias")
        self.w2 = Param(self._key("fc2.weight"), w2.astype(self.dtype))
        self.b2 = Param(self._key("fc2.bias"), np.zeros(channels, self.dtype), "bias")

    def params(self):
        return [self.w1, self.b1, self.w2, self.b2]

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        n, c = x.shape[0], self.c
        x3 = x.reshape(n, -1, c)
        pooled = self._buf("pooled", (n, c))
        spatial_mean(x3, pooled)
        self.h = pooled @ self.w1.data.reshape(self.s, c).T + self.b1.data
        self.sig_h = _sigmoid(self.h)
        self.gate = _sigmoid((self.h * self.sig_h) @ self.w2.data.reshape(c, self.s).T + self.b2.data)
        self.x, self.pooled = x, pooled
        y = self._buf("y", x.shape)
        _scale(x3, self.gate, y.reshape(n, -1, c))
        return y

    def _backward(self, dy: np.ndarray, consume: bool) -> np.ndarray:
        n, c, s = self.x.shape[0], self.c, self.s
        x3, dy3 = self.x.reshape(n, -1, c), dy.reshape(n, -1, c)
        ds = self._buf("ds", (n, c))
        _gate_grad(x3, dy3, ds)
        dg = ds * self.gate * (1 - self.gate)  # through the sigmoid gate
        a = self.h * self.sig_h
        self.w2.grad[...] = (dg.T @ a).reshape(c, s, 1, 1)
        self.b2.grad[...] = dg.sum(axis=0)
        da = dg @ self.w2.data.reshape(c, s)
        dh = da * self.sig_h * (1 + self.h * (1 - self.sig_h))  # through SiLU
        self.w1.grad[...] = (dh.T @ self.pooled).reshape(s, c, 1, 1)
        self.b1.grad[...] = dh.sum(axis=0)
        dpool = np.ascontiguousarray(dh @ self.w1.data.reshape(s, c), dtype=self.dtype)
        # dy is read whole above; _input_grad reads each element before writing dx at the same place
        dx = self._grad_buf(self.x.shape, dy if consume else None)
        _input_grad(dy3, self.gate, dpool, dx.reshape(n, -1, c), 1.0 / x3.shape[1])
        return dx

    def profile(self, shape: Shape):
        e = int(np.prod(shape))
        small = 4 * shape[0] * self.c * self.s
        return [self._record(shape, 2 * e + small, 4 * e + 2 * small, e)]
