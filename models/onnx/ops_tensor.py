"""Graph ops on computed tensors that the layer API has no layer for: indexing (Slice, Gather with constant
indices; Split is one ``Slice`` per output), constant padding (Pad), ``ReduceMean`` over any axes but the batch's, and the element-wise
``Pow`` with a constant exponent, ``Sqrt`` and ``Reciprocal``, ``Expand`` and ``Tile`` (a parameter broadcast to the
batch), and ``Source`` (a parameter as a computed tensor); forward and backward side by side, in numpy.

The indexing ops and the mean work in ONNX's layout (an image-shaped tensor, NHWC inside the engine, is
transposed to NCHW and back, as ``Move`` does); the element-wise ones need no layout. A tensor read by several
ops (Split's outputs all read its input) gets the sum of their gradients from ``GraphBlock``.
"""

from __future__ import annotations

import numpy as np

from models.onnx.ops import GraphOp, from_onnx, to_onnx, unbroadcast
from models.param import Param


class Slice(GraphOp):
    """``x[index]`` in ONNX's layout, ``index`` a tuple of Python slices (one per axis, the batch's whole).
    Keeps the input's shape."""

    def __init__(self, name, inputs, output, index: tuple[slice, ...]) -> None:
        super().__init__(name, inputs, output)
        self.index = index

    def forward(self, xs, training):
        x = to_onnx(xs[0])
        self.x_shape, self.dtype = x.shape, x.dtype
        return from_onnx(np.ascontiguousarray(x[self.index]))

    def backward(self, dy):
        dx = np.zeros(self.x_shape, self.dtype)
        dx[self.index] = to_onnx(dy)
        return [from_onnx(dx)]


class Pad(GraphOp):
    """``np.pad`` with a constant value in ONNX's layout, ``pads`` ((before, after), ...) one pair per axis, none
    negative, the batch's (0, 0). Keeps the input's shape."""

    def __init__(self, name, inputs, output, pads: tuple[tuple[int, int], ...], value: float) -> None:
        super().__init__(name, inputs, output)
        self.pads, self.value = pads, value

    def forward(self, xs, training):
        x = to_onnx(xs[0])
        self.index = tuple(slice(b, b + n) for (b, _), n in zip(self.pads, x.shape))
        return from_onnx(np.pad(x, self.pads, constant_values=self.value))

    def backward(self, dy):
        return [from_onnx(np.ascontiguousarray(to_onnx(dy)[self.index]))]


class Gather(GraphOp):
    """``np.take(x, indices, axis)`` in ONNX's layout (constant indices, negative ones wrapped; a scalar index
    drops the axis). Keeps the input's shape."""

    def __init__(self, name, inputs, output, indices: np.ndarray, axis: int) -> None:
        super().__init__(name, inputs, output)
        self.indices, self.axis = np.asarray(indices, np.int64), axis

    def forward(self, xs, training):
        x = to_onnx(xs[0])
        self.x_shape, self.dtype = x.shape, x.dtype
        return from_onnx(np.ascontiguousarray(np.take(x, self.indices % x.shape[self.axis], axis=self.axis)))

    def backward(self, dy):
        dx = np.zeros(self.x_shape, self.dtype)
        idx = (self.indices % self.x_shape[self.axis]).reshape(-1)
        g = np.moveaxis(to_onnx(dy).reshape(self.x_shape[:self.axis] + (idx.size,) + self.x_shape[self.axis + 1:]),
                        self.axis, 0)
        np.add.at(np.moveaxis(dx, self.axis, 0), idx, g)  # repeated indices add up
        return [from_onnx(dx)]


class ReduceMean(GraphOp):
    """The mean (or with ``total``, the sum: ReduceSum) over ``axes`` (ONNX's, never the batch's) in ONNX's layout,
    ``keepdims`` 0 or 1. Keeps the input's shape."""

    def __init__(self, name, inputs, output, axes: tuple[int, ...], keepdims: bool, total: bool = False) -> None:
        super().__init__(name, inputs, output)
        self.axes, self.keepdims, self.total = tuple(sorted(axes)), keepdims, total

    def forward(self, xs, training):
        x = to_onnx(xs[0])
        self.x_shape = x.shape
        reduce = x.sum if self.total else x.mean
        return from_onnx(np.ascontiguousarray(reduce(axis=self.axes, keepdims=self.keepdims)))

    def backward(self, dy):
        g = to_onnx(dy)
        if not self.keepdims:
            g = np.expand_dims(g, self.axes)
        count = 1 if self.total else int(np.prod([self.x_shape[a] for a in self.axes]))
        return [from_onnx(np.ascontiguousarray(np.broadcast_to(g / count, self.x_shape)))]


class ReduceL2(GraphOp):
    """The Euclidean norm over ``axes`` (ONNX's, never the batch's) in ONNX's layout, ``keepdims`` 0 or 1 (torch's
    ``F.normalize``: ReduceL2, Clip, Expand, Div). Keeps the input and the norm; a zero norm passes no gradient,
    as torch's."""

    def __init__(self, name, inputs, output, axes: tuple[int, ...], keepdims: bool) -> None:
        super().__init__(name, inputs, output)
        self.axes, self.keepdims = tuple(sorted(axes)), keepdims

    def forward(self, xs, training):
        self.x = to_onnx(xs[0])
        self.y = np.sqrt((self.x * self.x).sum(axis=self.axes, keepdims=True))
        return from_onnx(np.ascontiguousarray(self.y if self.keepdims else self.y.squeeze(self.axes)))

    def backward(self, dy):
        g = to_onnx(dy)
        if not self.keepdims:
            g = np.expand_dims(g, self.axes)
        scale = np.divide(g, self.y, out=np.zeros(np.broadcast_shapes(g.shape, self.y.shape), g.dtype),
                          where=self.y != 0)
        return [from_onnx(np.ascontiguousarray(self.x * scale))]


class ScatterND(GraphOp):
    """ONNX's ScatterND (reduction none) of a computed tensor by constant indices and updates, in ONNX's layout
    (Swin-V2 zeroes the key's third of its qkv bias so). The written elements pass no gradient back. Keeps the
    indices only."""

    def __init__(self, name, inputs, output, indices: np.ndarray, updates: np.ndarray) -> None:
        super().__init__(name, inputs, output)
        self.where = tuple(np.moveaxis(np.asarray(indices, np.int64), -1, 0))
        self.updates = updates

    def forward(self, xs, training):
        y = np.array(to_onnx(xs[0]))
        y[self.where] = self.updates
        return from_onnx(y)

    def backward(self, dy):
        g = np.array(to_onnx(dy))
        g[self.where] = 0
        return [from_onnx(g)]


class Power(GraphOp):
    """``Pow(x, p)`` with a constant scalar exponent, ``Sqrt`` (p = 1/2) and ``Reciprocal`` (p = -1), element-wise;
    p = 2 and 3 are products (torch's ``pow`` for them too: x * x, x * x * x). Keeps the input."""

    def __init__(self, name, inputs, output, op: str, p: float) -> None:
        super().__init__(name, inputs, output)
        self.op, self.p = op, float(p)

    def forward(self, xs, training):
        x = self.x = xs[0]
        if self.op == "Sqrt":
            self.y = np.sqrt(x)
            return self.y
        if self.op == "Reciprocal":
            self.y = 1 / x
            return self.y
        if self.p == 2:
            return x * x
        if self.p == 3:
            return x * x * x
        return np.power(x, self.p).astype(x.dtype, copy=False)

    def backward(self, dy):
        x = self.x
        if self.op == "Sqrt":
            return [dy / (2 * self.y)]
        if self.op == "Reciprocal":
            return [-dy * self.y * self.y]
        if self.p == 2:
            return [dy * (2 * x)]
        if self.p == 3:
            return [dy * (3 * (x * x))]
        return [(dy * (self.p * np.power(x, self.p - 1))).astype(dy.dtype, copy=False)]


class Source(GraphOp):
    """A parameter as a computed tensor (no input): what the graph computes from it (ViT's class token broadcast by
    ``Expand``, Swin's relative position bias gathered from its table) runs as graph ops, and the gradient that
    comes back is the parameter's (summed over the broadcast by the ops between). ``value``: a ``Param`` (kept in
    ONNX's layout) or a fixed array (a constant an op that does not fold reads). Keeps nothing."""

    def __init__(self, name, output, value) -> None:
        super().__init__(name, [], output)
        self.value = value

    def params(self):
        return [self.value] if isinstance(self.value, Param) else []

    def forward(self, xs, training):
        data = self.value.data if isinstance(self.value, Param) else self.value
        return from_onnx(np.array(data))

    def backward(self, dy):
        if isinstance(self.value, Param):
            self.value.grad[...] = to_onnx(dy).reshape(self.value.grad.shape)
        return []


class Expand(GraphOp):
    """ONNX's Expand (numpy broadcasting to ``shape``, the traced output shape) and Tile (``repeats``) in ONNX's
    layout. ``src``, ``dst``: where the input and the output hold the batch (``batch_axes.BatchAxis``); an input
    without it (a parameter) is broadcast (or tiled) to ``batch``, the block's actual batch (``GraphBlock`` sets
    it). Backward sums the gradient over the copies. Keeps the input's shape."""

    batch: int | None = None

    def __init__(self, name, inputs, output, shape: tuple, src=None, dst=None, repeats: tuple | None = None) -> None:
        super().__init__(name, inputs, output)
        self.shape, self.src, self.dst, self.repeats = tuple(shape), src, dst, repeats

    @property
    def needs_batch(self) -> bool:
        return self.src is None and self.dst is not None

    def forward(self, xs, training):
        x = to_onnx(xs[0])
        self.x_shape = x.shape
        shape = list(self.shape)
        reps = None if self.repeats is None else list(self.repeats)
        if self.dst is not None:
            batch = self.batch if self.src is None else x.shape[self.src.axis] // self.src.fold
            shape[self.dst.axis] = self.dst.outer * batch * self.dst.inner
            if reps is not None and self.src is None:
                reps[self.dst.axis] = batch
        self.reps = reps
        y = np.tile(x, reps) if reps is not None else np.broadcast_to(x, shape)
        return from_onnx(np.ascontiguousarray(y))

    def backward(self, dy):
        g = to_onnx(dy)
        if self.reps is None:
            return [from_onnx(np.ascontiguousarray(unbroadcast(g, self.x_shape).reshape(self.x_shape)))]
        x = (1,) * (len(self.reps) - len(self.x_shape)) + tuple(self.x_shape)
        g = g.reshape([v for r, s in zip(self.reps, x) for v in (r, s)]).sum(axis=tuple(range(0, 2 * len(x), 2)))
        return [from_onnx(np.ascontiguousarray(g.reshape(self.x_shape)))]
