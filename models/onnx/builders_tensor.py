"""The graph model's builders of the tensor ops (``ops_tensor``): Slice, Gather, Split and Pad of computed tensors,
ReduceMean over any axes, Pow with a constant exponent, Sqrt and Reciprocal, data movement (``Move``: reshapes and
transposes, the batch on any axis, ``batch_axes``), Expand and Tile, and the ``Source`` of a parameter the graph
computes from (ViT's class token, Swin's relative position bias table); one method per op table layer
(``network._Builder.BUILDERS``), which ``network._Builder`` inherits. Each reads one ``Node`` and returns its
graph op (Split: one ``Slice`` per output), or raises the builder's blocker (``self.fail``)."""

from __future__ import annotations

import numpy as np

from models.onnx.ir import Node
from models.onnx.op_table import OPS
from models.onnx.ops import GraphOp, Move
from models.onnx.ops_tensor import Expand, Gather, Pad, Power, ReduceL2, ReduceMean, ScatterND, Slice, Source

BATCH_WHOLE = "the batch's axis must stay whole (each sample is its own)"


class TensorBuilders:
    """Builders for ``network._Builder`` (which gives ``fail``, ``const``, ``global_pool``, ``batch_at`` and ``g``).
    The batch's axis is the input's (``batch_axes``: anywhere; none for a parameter's tensor)."""

    def _axis(self, n: Node, axis: int, rank: int) -> int:
        if not -rank <= axis < rank:
            raise self.fail(n, f"axis {axis} of a rank-{rank} tensor")
        if axis % rank == self.batch_at(n.inputs[0]):
            raise self.fail(n, f"axis {axis}: {BATCH_WHOLE}")
        return axis % rank

    def _checked(self, n: Node, op: GraphOp, index: tuple, shape: tuple, out: tuple) -> GraphOp:
        got = np.empty(shape, np.bool_)[index].shape if index else None
        if got is not None and tuple(got) != tuple(out):
            raise self.fail(n, f"gives {list(got)} here, the graph says {list(out)}")
        return op

    def slice(self, n: Node) -> GraphOp:
        """Constant starts, ends, axes and steps (inputs from opset 10 on, attributes before)."""
        x = n.input_shapes[0]
        rank = len(x)
        if len(n.inputs) > 1:
            values = [self.const(t) if t else None for t in n.inputs[1:5]]
            if len(values) < 2 or any((t or i < 2) and v is None for i, (t, v) in enumerate(zip(n.inputs[1:5], values))):
                raise self.fail(n, "starts, ends, axes and steps must be constants")
            starts, ends, axes, steps = (list(np.asarray(v).reshape(-1)) if v is not None else None
                                         for v in values + [None] * (4 - len(values)))
        else:
            starts, ends, axes, steps = (n.attrs.get(k) for k in ("starts", "ends", "axes", "steps"))
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        index = [slice(None)] * rank
        for a, s, e, k in zip(axes, starts, ends, steps):
            a = int(a) % rank if -rank <= int(a) < rank else int(a)
            index[a] = slice(int(s), int(e), int(k))
        b = self.batch_at(n.inputs[0])
        if b is not None and index[b] != slice(None):
            if np.empty(x[b], np.bool_)[index[b]].shape[0] != x[b] or (index[b].step or 1) < 0:
                raise self.fail(n, BATCH_WHOLE)
            index[b] = slice(None)  # whole at the traced batch: whole at any
        index = tuple(index)
        return self._checked(n, Slice(n.name, n.inputs[:1], n.outputs[0], index), index, x, n.output_shapes[0])

    def pad(self, n: Node) -> GraphOp:
        """Constant mode, constant pads (input 1 from opset 11 on, the attribute before), value and axes."""
        x = n.input_shapes[0]
        rank = len(x)
        if n.attrs.get("mode", "constant") != "constant":
            raise self.fail(n, f"mode {n.attrs['mode']!r}: constant padding only")
        values = [self.const(t) if t else None for t in n.inputs[1:4]]
        if any(t and v is None for t, v in zip(n.inputs[1:4], values)):
            raise self.fail(n, "pads, the value and axes must be constants")
        pads = n.attrs.get("pads") if len(n.inputs) < 2 else [int(v) for v in np.asarray(values[0]).reshape(-1)]
        value = float(np.asarray(values[1]).reshape(())) if len(values) > 1 and values[1] is not None \
            else float(n.attrs.get("value", 0.0))
        axes = [int(a) % rank for a in values[2]] if len(values) > 2 and values[2] is not None else range(rank)
        width = [[0, 0] for _ in range(rank)]
        for k, a in enumerate(axes):
            width[a] = [int(pads[k]), int(pads[k + len(axes)])]
        b = self.batch_at(n.inputs[0])
        if any(p < 0 for pair in width for p in pair) or (b is not None and width[b] != [0, 0]):
            raise self.fail(n, f"pads {list(pads)}: none negative, and none on the batch's axis")
        return Pad(n.name, n.inputs[:1], n.outputs[0], tuple(map(tuple, width)), value)

    def gather(self, n: Node) -> GraphOp:
        indices = self.const(n.inputs[1])
        if indices is None:
            raise self.fail(n, "the indices must be a constant")
        x = n.input_shapes[0]
        axis = self._axis(n, int(n.attrs.get("axis", 0)), len(x))
        if not np.all((-x[axis] <= indices) & (indices < x[axis])):
            raise self.fail(n, f"indices outside the {x[axis]} values of axis {axis}")
        return Gather(n.name, n.inputs[:1], n.outputs[0], indices, axis)

    def split(self, n: Node) -> list[GraphOp]:
        """One ``Slice`` per output, each the output's size along the axis (the graph's inferred shapes)."""
        x = n.input_shapes[0]
        axis = self._axis(n, int(n.attrs.get("axis", 0)), len(x))
        ops, start = [], 0
        for t, shape in zip(n.outputs, n.output_shapes):
            index = tuple(slice(start, start + shape[axis]) if a == axis else slice(None) for a in range(len(x)))
            ops.append(Slice(n.name, n.inputs[:1], t, index))
            start += shape[axis]
        if start != x[axis]:
            raise self.fail(n, f"the outputs take {start} of the {x[axis]} values of axis {axis}")
        return ops

    def reduce_mean(self, n: Node) -> GraphOp:
        """ReduceMean over H and W of an image batch: the engine's ``GlobalAvgPool`` (as the built-in models); else
        numpy's mean (ReduceSum: sum) over the axes."""
        x = n.input_shapes[0]
        rank = len(x)
        axes = n.attrs.get("axes")
        if not axes and self.batch_at(n.inputs[0]) is not None:
            raise self.fail(n, f"the mean over every axis: {BATCH_WHOLE}")
        axes = axes or range(rank)
        axes = tuple(sorted({self._axis(n, int(a), rank) for a in axes}))
        if rank == 4 and axes == (2, 3) and n.op == "ReduceMean":
            return self.global_pool(n)
        return ReduceMean(n.name, n.inputs[:1], n.outputs[0], axes, bool(n.attrs.get("keepdims", 1)),
                          total=n.op == "ReduceSum")

    def reduce_l2(self, n: Node) -> GraphOp:
        """The Euclidean norm over the axes (every axis but the batch's when none are given)."""
        rank = len(n.input_shapes[0])
        axes = n.attrs.get("axes")
        if not axes and self.batch_at(n.inputs[0]) is not None:
            raise self.fail(n, f"the norm over every axis: {BATCH_WHOLE}")
        axes = tuple(sorted({self._axis(n, int(a), rank) for a in (axes or range(rank))}))
        return ReduceL2(n.name, n.inputs[:1], n.outputs[0], axes, bool(n.attrs.get("keepdims", 1)))

    def scatter_nd(self, n: Node) -> GraphOp:
        indices, updates = self.const(n.inputs[1]), self.const(n.inputs[2])
        if indices is None or updates is None or n.attrs.get("reduction", "none") != "none":
            raise self.fail(n, "constant indices and updates, reduction none")
        return ScatterND(n.name, n.inputs[:1], n.outputs[0], indices,
                         np.asarray(updates, self.dtype if np.issubdtype(updates.dtype, np.floating) else None))

    def power(self, n: Node) -> GraphOp:
        p = 0.5 if n.op == "Sqrt" else -1.0 if n.op == "Reciprocal" else self.const(n.inputs[1])
        if p is None or np.size(p) != 1:
            raise self.fail(n, "the exponent must be a constant scalar")
        return Power(n.name, n.inputs[:1], n.outputs[0], n.op, float(np.asarray(p).reshape(())))

    def move(self, n: Node) -> GraphOp:
        x, y = n.input_shapes[0], n.output_shapes[0]
        if n.op == "Transpose":
            return Move(n.name, n.inputs[:1], n.outputs[0], y, list(n.attrs.get("perm", range(len(x) - 1, -1, -1))))
        return Move(n.name, n.inputs[:1], n.outputs[0], y, None, self.batch_of(n.inputs[0]),
                    self.batch_of(n.outputs[0]))

    def expand(self, n: Node) -> GraphOp:
        """Expand (a constant shape) or Tile (constant repeats), of a parameter too (``batch_axes._expanded``)."""
        repeats = None
        if n.op == "Tile":
            repeats = self.const(n.inputs[1])
            if repeats is None:
                raise self.fail(n, "the repeats must be a constant")
            repeats = tuple(int(r) for r in repeats)
        return Expand(n.name, n.inputs[:1], n.outputs[0], n.output_shapes[0], self.batch_of(n.inputs[0]),
                      self.batch_of(n.outputs[0]), repeats)

    def sources(self, n: Node) -> list[GraphOp]:
        """A ``Source`` for each constant data input of a node whose op reads computed tensors only (a parameter
        that ``Expand``, ``Gather``... compute from; a constant an op that does not fold reads)."""
        if OPS[n.op].layer in self.CONSTANTS_READ:
            return []
        out = []
        for t in n.inputs if n.op == "Concat" else n.inputs[:1]:
            value = self.const(t)
            if value is None or t in self.sourced:
                continue
            self.sourced.add(t)
            learned = self.g.learned(t) and np.issubdtype(value.dtype, np.floating)
            out.append(Source(n.name, t, self._weight(n, t, value, "bias") if learned else
                              np.asarray(value, self.dtype if np.issubdtype(value.dtype, np.floating) else None)))
        return out
