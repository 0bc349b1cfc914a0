"""The attention building blocks as graph ops: Softmax on any axis and MatMul of any two operands (numpy's
``matmul``, batch dimensions broadcast), forward and backward side by side, in numpy (the layer API has no layer
for either; a MatMul of ``[N, features]`` by a constant weight stays the engine's ``Dense``).

Both work in ONNX's layout: Softmax maps its axis onto the engine's (an image batch is NHWC inside) and needs no
copy; MatMul multiplies the last two axes of ONNX's layout, so an image-shaped operand (rank 4, as attention's
``[N, heads, tokens, d]``) is transposed to it and its result back.
"""

from __future__ import annotations

import numpy as np

from models.onnx.ops import NHWC_AXIS, GraphOp, from_onnx, to_onnx, unbroadcast
from models.param import Param


class Softmax(GraphOp):
    """``exp(x - max) / sum`` along one axis (opset 13 on; ``flatten``: opsets 1-12, the axes from ``axis`` on as
    one, in ONNX's layout). Keeps its output."""

    def __init__(self, name, inputs, output, axis: int, rank: int, flatten: bool = False) -> None:
        super().__init__(name, inputs, output)
        axis %= rank
        self.flatten = flatten and axis < rank - 1
        self.axis = axis if self.flatten or rank != 4 else NHWC_AXIS[axis]

    def _view(self, a: np.ndarray) -> np.ndarray:
        if not self.flatten:
            return a
        a = to_onnx(a)
        self.shape = a.shape
        return a.reshape(a.shape[:self.axis] + (-1,))

    def _back(self, a: np.ndarray) -> np.ndarray:
        return from_onnx(a.reshape(self.shape)) if self.flatten else a

    def forward(self, xs, training):
        x = self._view(xs[0])
        axis = -1 if self.flatten else self.axis
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        self.y = e / e.sum(axis=axis, keepdims=True)
        return self._back(self.y)

    def backward(self, dy):  # dx = y * (dy - sum(dy * y)), as torch
        g = self._view(dy)
        axis = -1 if self.flatten else self.axis
        return [self._back(self.y * (g - (g * self.y).sum(axis=axis, keepdims=True)))]


def _t(a: np.ndarray) -> np.ndarray:
    return a.swapaxes(-1, -2)


class MatMul(GraphOp):
    """numpy's ``matmul`` of two operands, each a computed tensor (by name), a trainable ``Param`` (a constant
    weight, kept in ONNX's layout) or a fixed array, with batch broadcasting and 1-D operands as numpy has them.
    Keeps both operands (in ONNX's layout)."""

    def __init__(self, name, operands: list, output: str) -> None:
        super().__init__(name, [o for o in operands if isinstance(o, str)], output)
        self.operands = operands

    def params(self) -> list[Param]:
        return [o for o in self.operands if isinstance(o, Param)]

    def forward(self, xs, training):
        it = iter(xs)
        self.a, self.b = (to_onnx(next(it)) if isinstance(o, str) else o.data if isinstance(o, Param) else o
                          for o in self.operands)
        return from_onnx(np.matmul(self.a, self.b))

    def backward(self, dy):
        a, b, g = self.a, self.b, to_onnx(dy)
        a2 = a[None, :] if a.ndim == 1 else a  # numpy's promotion of a vector, undone below
        b2 = b[:, None] if b.ndim == 1 else b
        g = g[..., None, :] if a.ndim == 1 else g
        g = g[..., None] if b.ndim == 1 else g
        grads = [unbroadcast(np.matmul(g, _t(b2)), a2.shape).reshape(a.shape),
                 unbroadcast(np.matmul(_t(a2), g), b2.shape).reshape(b.shape)]
        out = []
        for o, grad in zip(self.operands, grads):
            if isinstance(o, Param):
                o.grad[...] = grad
            elif isinstance(o, str):
                out.append(from_onnx(np.ascontiguousarray(grad)))
        return out
