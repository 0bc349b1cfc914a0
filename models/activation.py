"""Elementwise activations: SiLU (swish), sigmoid and ReLU, as standalone layers.

Inside EfficientNet the activations after a norm are fused into the norm
(``models/norm.py``); these layers serve the SE block, the dense network and the checks.
"""

from __future__ import annotations

import math

import numpy as np

from jit import prange
from models.kernels import norm as K
from models.kernels.threads import compiled_kernel
from models.layer import Layer, Shape

_CODES = {"silu": 1, "relu": 2, "sigmoid": 3}


@compiled_kernel(parallel=True)
def _act_forward(x, y, act):
    for i in prange(x.size):
        z = x[i]
        y[i] = K.sigmoid(z) if act == 3 else K.act_value(z, act)


@compiled_kernel(parallel=True)
def _act_backward(x, y, dy, dx, act):
    for i in prange(x.size):
        if act == 3:
            dx[i] = dy[i] * y[i] * (1.0 - y[i])
        else:
            dx[i] = dy[i] * K.act_grad(x[i], act)


@compiled_kernel()
def _erfc_into(x, out):
    for i in range(x.shape[0]):
        out[i] = math.erfc(x[i])


def erfc(x: np.ndarray) -> np.ndarray:
    """erfc(x) element by element in float64 (numpy has no erf): ``math.erfc`` compiled, the same bits. Exact
    GELU's Phi(x) = erfc(-x / sqrt 2) / 2 stays accurate in the far left tail, where 1 + erf(x) would cancel."""
    flat = np.ascontiguousarray(x, dtype=np.float64).ravel()
    out = np.empty_like(flat)
    _erfc_into(flat, out)
    return out.reshape(np.shape(x))


class Activation(Layer):
    """``silu`` (x*sigmoid(x)), ``sigmoid`` or ``relu``. Keeps its input and its output."""

    kind = "act"

    def __init__(self, name: str, block: str, fn: str, dtype=np.float32) -> None:
        super().__init__(name, block, dtype)
        if fn not in _CODES:
            raise ValueError(f"activation {name}: {fn!r} is not one of {sorted(_CODES)}")
        self.fn, self.code = fn, _CODES[fn]

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        x = np.ascontiguousarray(x)
        y = self._buf("y", x.shape)
        _act_forward(x.reshape(-1), y.reshape(-1), self.code)
        self.x, self.y = x, y
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dx = self._grad_buf(self.x.shape)
        _act_backward(self.x.reshape(-1), self.y.reshape(-1), np.ascontiguousarray(dy).reshape(-1),
                      dx.reshape(-1), self.code)
        return dx

    def profile(self, shape: Shape):
        e = int(np.prod(shape))
        return [self._record(shape, 4 * e, 6 * e, e)]
