"""The graph model's builders of pooling, layer norm and the attention ops (Softmax, MatMul, Einsum), one method per op
table layer (``_Builder.BUILDERS``); ``network._Builder`` inherits them. Each reads one ``Node`` and returns its
graph op, or raises the builder's blocker (``self.fail``) naming what the node asks that training does not take."""

from __future__ import annotations

import math

import numpy as np

from models.conv import same_pads
from models.norm import GroupNorm
from models.onnx.ir import Node
from models.onnx.op_table import CEIL_MODE_FIX
from models.onnx.ops import NCHW_TO_NHWC, GraphOp, LayerOp
from models.onnx.ops_attention import MatMul, Softmax
from models.onnx.ops_einsum import Einsum, einsum_terms, letter_sizes
from models.onnx.ops_norm import LayerNorm
from models.pool import AvgPool2d, GlobalAvgPool, MaxPool2d


class PoolNormAttention:
    """Builders for ``network._Builder`` (which gives ``fail``, ``const``, ``param``, ``dense``, ``g`` and
    ``dtype``)."""

    def _window(self, n: Node) -> tuple:
        """kernel, strides, (top, bottom, left, right) pads and ceil mode of a 2-D pooling node."""
        a, x = n.attrs, n.input_shapes[0]
        if len(x) != 4:
            raise self.fail(n, f"2-D pooling of an image batch only (input of rank {len(x)})")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            raise self.fail(n, f"dilations {a['dilations']}: pooling windows without dilation only")
        k, s = list(a.get("kernel_shape", [1, 1])), list(a.get("strides", [1, 1]))
        auto = a.get("auto_pad", "NOTSET")
        if auto == "NOTSET":
            t, left, b, r = a.get("pads", [0, 0, 0, 0])
        elif auto == "VALID":
            t = left = b = r = 0
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            (t, b), (left, r) = (same_pads(x[i + 2], k[i], s[i]) for i in range(2))
            if auto == "SAME_LOWER":
                t, b, left, r = b, t, r, left
        else:
            raise self.fail(n, f"auto_pad {auto}")
        if max(t, b) > k[0] // 2 or max(left, r) > k[1] // 2:
            raise self.fail(n, f"pads {[t, left, b, r]} wider than half the {k[0]}x{k[1]} window (torch's limit)")
        return tuple(k), tuple(s), (int(t), int(b), int(left), int(r)), bool(a.get("ceil_mode", 0))

    def _pool(self, n: Node, layer) -> GraphOp:
        want = tuple(n.output_shapes[0][i] for i in NCHW_TO_NHWC)
        got = layer.out_shape(tuple(n.input_shapes[0][i] for i in NCHW_TO_NHWC))
        if tuple(got) != want:  # onnx's shape inference and torch's size rule disagree (ceil mode)
            raise self.fail(n, f"the graph says the output is {list(n.output_shapes[0])}, torch's pooling gives "
                               f"{[got[i] for i in (0, 3, 1, 2)]}", CEIL_MODE_FIX if layer.ceil_mode else "")
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], layer)

    def max_pool(self, n: Node) -> GraphOp:
        if len(n.outputs) > 1:
            raise self.fail(n, "max pooling's Indices output does not train")
        k, s, pads, ceil = self._window(n)
        return self._pool(n, MaxPool2d(n.name, n.name, k, s, pads, self.dtype, ceil))

    def avg_pool(self, n: Node) -> GraphOp:
        """A window (``AvgPool2d``), or ``GlobalAvgPool`` where it is the whole image (the built-in's bits)."""
        k, s, pads, ceil = self._window(n)
        if n.output_shapes[0][2:] == (1, 1) and not any(pads) and k == tuple(n.input_shapes[0][2:]):
            return self.global_pool(n)
        return self._pool(n, AvgPool2d(n.name, n.name, k, s, pads, ceil, n.attrs.get("count_include_pad", 0),
                                       self.dtype))

    def global_pool(self, n: Node) -> GraphOp:
        out = n.output_shapes[0]
        view = None if len(out) == 2 else (1, 1, out[1])
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], GlobalAvgPool(n.name, n.name, self.dtype), view)

    def layer_norm(self, n: Node) -> GraphOp:
        x = n.input_shapes[0]
        rank = len(x)
        axis = n.attrs.get("axis", -1)
        batch = self.batch_at(n.inputs[0])
        if not -rank <= axis < rank or (batch is not None and axis % rank <= batch):
            raise self.fail(n, f"axis {axis} of a rank-{rank} tensor: normalise from after the batch's axis "
                               f"{batch} on (the batch's axis would mix the samples)")
        axis %= rank
        if len(n.outputs) > 1:
            raise self.fail(n, "the Mean and InvStdDev outputs do not train: read only the normalised output")
        shape = tuple(x[axis:])
        k = math.prod(shape)
        names = [t for t in n.inputs[1:3] if t]
        values = [self.const(t) for t in names]
        if len(names) < 1 or any(v is None or v.size != k for v in values):
            raise self.fail(n, f"a scale (and bias) of {list(shape)} as initializers, one per normalised value")
        nhwc = rank == 4 and axis == 1  # the engine's rows (H, W, C): the weights in that order

        def engine(v):
            v = np.asarray(v).reshape(shape)
            return v.transpose(1, 2, 0).reshape(k) if nhwc else v.reshape(k)

        def onnx(v, like):
            return v.reshape(x[2], x[3], x[1]).transpose(2, 0, 1).reshape(like) if nhwc else v.reshape(like)

        layer = GroupNorm(n.name, n.name, k, 1, n.attrs.get("epsilon", 1e-5), None, self.dtype)
        learned = tuple(self.g.learned(t) for t in names) + (False,) * (2 - len(names))
        for i, (t, v) in enumerate(zip(names, values)):
            if learned[i]:
                setattr(layer, ("weight", "bias")[i], self.param(n, t, engine(v), ("norm_scale", "norm_offset")[i],
                                                                 lambda a, like=v.shape: onnx(a, like)))
            else:  # a constant the graph computes (torch's zero bias of LayerNorm(bias=False)): fixed
                layer.params()[i].data[...] = engine(v)
        return LayerNorm(n.name, n.inputs[:1], n.outputs[0], layer, rank == 4 and not nhwc, learned, axis)

    def softmax(self, n: Node) -> GraphOp:
        rank = len(n.input_shapes[0])
        opset13 = self.g.opset >= 13
        axis = n.attrs.get("axis", -1 if opset13 else 1)
        if not -rank <= axis < rank:
            raise self.fail(n, f"axis {axis} of a rank-{rank} tensor")
        return Softmax(n.name, n.inputs[:1], n.outputs[0], axis, rank, flatten=not opset13)

    def matmul(self, n: Node) -> GraphOp:
        """A constant weight on ``[N, features]``: the engine's ``Dense``; else numpy's matmul of the two
        operands, a constant one a trainable weight (kept in ONNX's layout)."""
        consts = [self.const(t) for t in n.inputs[:2]]
        if consts[1] is not None and consts[0] is None and len(n.input_shapes[0]) == 2 and consts[1].ndim == 2:
            return self.dense(n)
        if all(c is not None and not self.g.learned(t) for t, c in zip(n.inputs, consts)):
            raise self.fail(n, "a product of two constants (fold it before exporting)")
        if all(c is not None for c in consts):  # torch's Linear on a buffer: the input is fixed, the weight learns
            return MatMul(n.name, [np.asarray(consts[0], self.dtype), self._operand(n, n.inputs[1], consts[1])],
                          n.outputs[0])
        return MatMul(n.name, [self._operand(n, t, c) for t, c in zip(n.inputs, consts)], n.outputs[0])

    def _operand(self, n: Node, t: str, value: np.ndarray | None):
        """A computed tensor by name, a constant the file learns as a trainable weight, or a fixed array (a
        buffer: Swin-V2's relative coordinates table, which its position MLP multiplies by a weight)."""
        if value is None:
            return t
        if self.g.learned(t):
            return self._weight(n, t, value)
        return np.asarray(value, self.dtype)

    def einsum(self, n: Node) -> GraphOp:
        """numpy's einsum of the operands, a constant one a trainable weight (kept in ONNX's layout)."""
        consts = [self.const(t) for t in n.inputs]
        if all(c is not None and not self.g.learned(t) for t, c in zip(n.inputs, consts)):
            raise self.fail(n, "an Einsum of constants only (fold it before exporting)")
        try:
            terms, out = einsum_terms(n.attrs["equation"], [len(s) for s in n.input_shapes])
            letter_sizes(terms, n.input_shapes)
        except ValueError as err:
            raise self.fail(n, str(err)) from None
        return Einsum(n.name, [self._operand(n, t, c) for t, c in zip(n.inputs, consts)], n.outputs[0], terms, out)

    def _weight(self, n: Node, t: str, value: np.ndarray, kind: str = "weight"):
        """A constant operand as a trainable weight, named (and written back) as the file's initializer it
        transposes where it does (torch's ``Linear``: ``MatMul(x, Transpose(weight))``)."""
        if t in self.g.transposed:
            source, perm = self.g.transposed[t]
            return self.param(n, source, value, kind, lambda v, back=tuple(np.argsort(perm)): v.transpose(back))
        return self.param(n, t, value, kind)
