"""A trainable model of the numpy engine built from an imported ONNX graph (``graph.load_graph``).

``graph_model(graph)`` turns every node into one of the engine's layers, or a small numpy op for
what the layer API has no layer for (``ops.py``), and wires them as the graph says. ``GraphBlock``
is the DAG executor: forward runs its ops in topological order keeping tensors by name; backward runs
them in reverse, and a tensor read by several ops gets the sum of their gradients. Runs of ops that the
layer API computes as one layer become that layer (``fuse_ops.py``: norm + SiLU/ReLU, squeeze-excitation),
so that an exported built-in network computes the built-in's bits. The graph is cut into blocks (pipeline
split points) where exactly one tensor crosses, by the exporter's node name prefixes (``/layer1/...`` ->
``layer1``) or at named splits (``blocks.py``), so ``GraphModel`` is a ``models.model.Model`` like
the built-in ones: ``params``, ``forward``/``backward``, ``forward_blocks``, ``state_dict``,
``profile`` (the importer's ``ProfiledGraph`` rows) and ``blocks``.

Parameters are named by the file's initializers (torch's exporter: the module's parameter names; a weight the
exporter reshapes, as a group norm's Unsqueeze, by the initializer it reshapes) and
keep ONNX's layout where the engine's is the same (OIHW convolution, ``[out, in]`` dense); a
broadcast constant [C, 1, 1] is stored [1, 1, 1, C] (``ParamSite.to_onnx`` converts back).
BatchNormalization keeps its running statistics (buffers named by their initializers, torch's
momentum = 1 - ONNX's) and normalises with the batch's statistics when training. Torch's group norm
export (Reshape -> InstanceNormalization -> Reshape -> Mul -> Add) becomes the engine's GroupNorm, and its
stochastic depth (``DropPath``) the engine's drop-connect, drawn from the model's generator.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from models.activation import Activation
from models.conv import Conv2d
from models.dense import Dense
from models.layer import Layer, Rng
from models.model import Model
from models.norm import BatchNorm2d, GroupNorm
from models.onnx.batch_axes import FIRST, BatchAxis, batch_axes
from models.onnx.blocks import cut, split_starts
from models.onnx.builders import PoolNormAttention
from models.onnx.builders_tensor import TensorBuilders
from models.onnx.fuse_ops import fuse_channels_last, fuse_norm_act, fuse_squeeze_excite
from models.onnx.ir import Blocker, Graph, Node, OnnxImportError, blockers_text
from models.onnx.op_table import EVAL_EXPORT_FIX, NORM_OPS, OPS, trainable_text
from models.onnx.ops import NHWC_AXIS, Binary, Concat, DropPath, LayerOp, GraphOp, Unary, const_to_engine
from models.onnx.profile import ProfiledGraph
from models.param import Param
from models.pool import Dropout

TRAINABLE_OPS = trainable_text()  # the op table's (op_table.py), in words


@dataclass
class ParamSite:
    """Where a parameter came from: its initializer and how to write it back in ONNX's layout."""

    initializer: str
    param: Param
    to_onnx: Callable[[np.ndarray], np.ndarray]


class GraphBlock(Layer):
    """A contiguous run of the graph's ops that reads one tensor and writes one.
    Keeps: what each op keeps, and the names of the tensors it computes (only during a step)."""

    kind = "graph"

    def __init__(self, name: str, ops: list[GraphOp], input: str, output: str, dtype,
                 batch: BatchAxis = FIRST) -> None:
        super().__init__(name, name, dtype)
        self.ops, self.input, self.output, self.batch = ops, input, output, batch
        self.need_dx = True
        self.batched = [op for op in ops if getattr(op, "needs_batch", False)]

    def params(self) -> list[Param]:
        return [p for op in self.ops for p in op.params()]

    def buffers(self) -> dict[str, np.ndarray]:
        out = {}
        for op in self.ops:
            if op.layer is not None:
                out.update(op.layer.buffers())
        return out

    def set_grad_pool(self, pool) -> None:
        """The layers keep their own gradient buffers: each runs once per step (no pool to hand back to)."""

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        t = {self.input: x}
        if self.batched:  # ops that broadcast a parameter to the batch take the actual one from the block's input
            axis = NHWC_AXIS[self.batch.axis] if x.ndim == 4 else self.batch.axis
            for op in self.batched:
                op.batch = x.shape[axis] // self.batch.fold
        for op in self.ops:
            t[op.output] = op.forward([t[name] for name in op.inputs], training)
        return t[self.output]

    def backward(self, dy: np.ndarray) -> np.ndarray | None:
        grads: dict[str, np.ndarray] = {self.output: dy}
        for op in reversed(self.ops):
            g = grads.pop(op.output, None)
            if g is None:  # no path to the output (an unused branch)
                continue
            if op.layer is not None and hasattr(op.layer, "need_dx"):
                op.layer.need_dx = self.need_dx or op.inputs != [self.input]
            for name, dx in zip(op.inputs, op.backward(g)):
                if dx is None:
                    continue
                # a tensor read twice: a fresh sum (never in place: dx may be an op's own buffer)
                grads[name] = dx if name not in grads else grads[name] + dx
        return grads.get(self.input) if self.need_dx else None

    def out_shape(self, shape):
        raise NotImplementedError("GraphModel.profile counts the graph")


class GraphModel(Model):
    """A ``Model`` over ``GraphBlock``s; ``sites``: every parameter's initializer (``ParamSite``);
    ``graph``: the imported graph (for the profile and the export)."""

    def __init__(self, graph: Graph, blocks, sites: list[ParamSite], rng: Rng, dtype) -> None:
        n, c, h, w = graph.input_shape
        super().__init__(graph.name, blocks, (h, w, c), rng, dtype)
        self.graph, self.sites = graph, sites
        self._network = ProfiledGraph(graph, [b.ops[0].name for _, b in blocks])
        self._rename = {b.ops[0].name: name for name, b in blocks}
        self._rename[graph.nodes[0].name] = blocks[0][0]

    def profile(self, batch_size: int):
        """The importer's rows (``ProfiledGraph``), in this model's blocks."""
        return [dataclasses.replace(r, block=self._rename.get(r.block, r.block))
                for r in self._network.profile(batch_size)]


def graph_model(graph: Graph, dtype=np.float32, seed: int = 0, num_classes: int | None = None,
                splits: Sequence[str] = (), shown: str | None = None) -> GraphModel:
    """The trainable model of ``graph``; ``num_classes``: replace a final Gemm whose class count differs
    (new weights, torch's ``nn.Linear`` init from ``seed``). One ``OnnxImportError`` line for every node
    it cannot train (``_Blocked``: each op, its count, first nodes and fix, ``ir.blockers_text``) or an output
    that is not the logits of one image batch. ``splits``: pipeline splits that
    name blocks, nodes or module paths (``blocks.split_starts``; ``shown``: the file's name for its errors)."""
    n = graph.input_shape[0]
    if len(graph.outputs) != 1 or len(graph.output_shapes[0]) != 2 or graph.output_shapes[0][0] != n:
        raise OnnxImportError(f"{graph.name}: the graph's output must be the logits of one image batch [{n}, classes]; "
                              f"got outputs {list(graph.outputs)} of shapes {[list(s) for s in graph.output_shapes]}")
    axes, why = batch_axes(graph)
    if axes.get(graph.outputs[0]) not in (FIRST, "unknown"):
        raise OnnxImportError(f"{shown or graph.name}: the logits {graph.outputs[0]!r} do not hold the batch on axis 0 "
                              f"(the graph moves it to {axes.get(graph.outputs[0])})")
    rng = Rng(np.random.default_rng(seed))
    builder = _Builder(graph, dtype, rng, seed, num_classes, axes, why)
    ops, blockers = [], []
    for node in graph.nodes:
        try:
            made = builder.node(node)
            ops += made if isinstance(made, list) else [made]  # Split: one op per output
        except _Blocked as e:
            blockers.append(e.blocker)
    if blockers:
        raise OnnxImportError(f"{shown or graph.name}: cannot train{'' if len(blockers) > 1 else ':'} "
                              f"{blockers_text(blockers)}; the trainable graph model supports {TRAINABLE_OPS}", blockers)
    ops = fuse_squeeze_excite(_live(ops, graph.outputs[0]), graph, dtype)
    ops = fuse_channels_last(fuse_norm_act(ops, graph.outputs[0]), graph.outputs[0])
    if num_classes is not None and graph.output_shapes[0][1] != num_classes \
            and not any(isinstance(op.layer, Dense) and op.output == graph.outputs[0] for op in ops):
        raise OnnxImportError(f"{graph.name}: the classifier has {graph.output_shapes[0][1]} classes, not "
                              f"model.num_classes={num_classes}, and the output is not a Gemm to replace")
    starts = split_starts(graph, splits, shown or graph.name, "ipu.pipeline_splits")
    blocks = [(name, GraphBlock(name, part, inp, out, dtype, axes[inp])) for name, part, inp, out
              in cut(ops, graph, starts)]
    return GraphModel(graph, blocks, builder.sites, rng, dtype)


def _live(ops: list[GraphOp], output: str) -> list[GraphOp]:
    """The ops the output depends on (unread side outputs dropped)."""
    need, keep = {output}, []
    for op in reversed(ops):
        if op.output in need:
            keep.append(op)
            need.update(op.inputs)
    return keep[::-1]


class _Blocked(OnnxImportError):
    """A node the graph model cannot train (``graph_model`` gathers every one before it says so)."""

    def __init__(self, blocker: Blocker) -> None:
        super().__init__(blockers_text([blocker]))
        self.blocker = blocker


class _Builder(PoolNormAttention, TensorBuilders):
    def __init__(self, graph: Graph, dtype, rng: Rng, seed: int, num_classes: int | None, axes: dict,
                 why: dict[str, str]) -> None:
        self.g, self.dtype, self.rng = graph, np.dtype(dtype), rng
        self.axes, self.why = axes, why
        self.init_rng = np.random.default_rng(seed)
        self.num_classes = num_classes
        self.sites: list[ParamSite] = []
        self.used: set[str] = set()
        self.sourced: set[str] = set()
        self.where = graph.name

    def fail(self, node: Node, why: str, fix: str = "") -> _Blocked:
        return _Blocked(Blocker(node.op, node.name, why, fix))

    def const(self, name: str) -> np.ndarray | None:
        return self.g.initializers.get(name)

    def batch_of(self, t: str) -> BatchAxis | None:
        """Where tensor ``t`` holds the batch (``batch_axes``; None: it has none, a parameter's broadcast)."""
        b = self.axes.get(t)
        return b if isinstance(b, BatchAxis) else None

    def batch_at(self, t: str) -> int | None:
        b = self.batch_of(t)
        return None if b is None else b.axis

    def param(self, node: Node, name: str, data: np.ndarray, kind: str, to_onnx=lambda a: a) -> Param:
        """A parameter of ``node`` named by the file's initializer (through the reshapes the importer folded)."""
        name = self.g.origins.get(name, name)
        if name in self.used:
            folded = not any(n.op in NORM_OPS for n in self.g.nodes)  # no norm left: an eval-mode export
            raise self.fail(node, f"initializer {name!r} is read by more than one layer (shared weights do not train)",
                            EVAL_EXPORT_FIX if folded else "")
        self.used.add(name)
        p = Param(name, np.array(data, dtype=self.dtype), kind)
        self.sites.append(ParamSite(name, p, to_onnx))
        return p

    # -- nodes -------------------------------------------------------------------------------
    def conv(self, n: Node) -> GraphOp:
        a = n.attrs
        if len(n.input_shapes[0]) != 4:
            raise self.fail(n, "only 2-D convolutions")
        w = self.const(n.inputs[1])
        if w is None:
            raise self.fail(n, "the weight must be an initializer")
        cout, cin_g, kh, kw = w.shape
        groups = int(a.get("group", 1))
        auto = a.get("auto_pad", "NOTSET")
        if auto == "SAME_UPPER":
            padding = "same"
        elif auto == "VALID":
            padding = 0
        elif auto == "NOTSET":
            t, l, b, r = a.get("pads", [0, 0, 0, 0])
            padding = (int(t), int(b), int(l), int(r))
        else:
            raise self.fail(n, f"auto_pad {auto}")
        bias = len(n.inputs) > 2 and bool(n.inputs[2])
        layer = Conv2d(n.name, n.name, cin_g * groups, cout, (kh, kw), tuple(a.get("strides", [1, 1])), padding,
                       groups, bias, self.dtype, dilation=tuple(a.get("dilations", [1, 1])))
        layer.weight = self.param(n, n.inputs[1], w, "weight")
        if bias:
            layer.bias = self.param(n, n.inputs[2], self.const(n.inputs[2]), "bias")
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], layer)

    def dense(self, n: Node) -> GraphOp:
        a = n.attrs
        x_shape = n.input_shapes[0]
        w = self.const(n.inputs[1])
        if w is None or len(x_shape) != 2 or a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 \
                or a.get("beta", 1.0) != 1.0:
            raise self.fail(n, "a dense layer reads [N, features] and a constant weight (no transA, alpha = beta = 1)")
        trans = n.op == "Gemm" and a.get("transB", 0)
        weight = w if trans else w.T
        back = (lambda v: v) if trans else (lambda v: v.T)
        bias = n.inputs[2] if n.op == "Gemm" and len(n.inputs) > 2 and n.inputs[2] else None
        if bias is not None and self.const(bias).shape != (weight.shape[0],):
            raise self.fail(n, f"bias of shape {self.const(bias).shape} (one per output expected)")
        cout, cin = weight.shape
        new = n.outputs[0] in self.g.outputs and self.num_classes not in (None, cout)
        if new:  # a new classifier for the dataset's classes: torch's nn.Linear init
            cout, bound = self.num_classes, 1.0 / math.sqrt(cin)
            weight = self.init_rng.uniform(-bound, bound, (cout, cin))
        source = n.inputs[1]
        if not trans and source in self.g.transposed:  # torch's Linear without bias: MatMul(x, Transpose(W))
            source, perm = self.g.transposed[source]
            back = lambda v, inv=tuple(np.argsort(perm)): v.T.transpose(inv)  # noqa: E731
        layer = Dense(n.name, n.name, cin, cout, bias is not None, self.dtype)
        layer.weight = self.param(n, source, weight, "weight", back)
        if bias is not None:
            b = self.init_rng.uniform(-bound, bound, cout) if new else self.const(bias)
            layer.bias = self.param(n, bias, b, "bias")
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], layer)

    def batch_norm(self, n: Node) -> GraphOp:
        x_shape = n.input_shapes[0]
        consts = [self.const(t) for t in n.inputs[1:5]]
        if any(c is None for c in consts) or len(x_shape) not in (2, 4):
            raise self.fail(n, "scale, offset and running statistics must be initializers; input [N, C] or [N, C, H, W]")
        layer = BatchNorm2d(n.name, n.name, x_shape[1], n.attrs.get("epsilon", 1e-5),
                            1.0 - n.attrs.get("momentum", 0.9), None, self.dtype)
        layer.weight = self.param(n, n.inputs[1], consts[0], "norm_scale")
        layer.bias = self.param(n, n.inputs[2], consts[1], "norm_offset")
        layer.running_mean[...] = consts[2]
        layer.running_var[...] = consts[3]
        mean, var = n.inputs[3], n.inputs[4]
        layer.buffers = lambda: {mean: layer.running_mean, var: layer.running_var}
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], layer, as_rank4=len(x_shape) == 2)

    def group_norm(self, n: Node, groups: int, scale: str, offset: str, inputs, output, c: int, to_onnx,
                   offset_to_onnx=None) -> GraphOp:
        layer = GroupNorm(n.name, n.name, c, groups, n.attrs.get("epsilon", 1e-5), None, self.dtype)
        layer.weight = self.param(n, scale, self.const(scale).reshape(c), "norm_scale", to_onnx)
        layer.bias = self.param(n, offset, self.const(offset).reshape(c), "norm_offset", offset_to_onnx or to_onnx)
        return LayerOp(n.name, inputs, output, layer)

    def binary(self, n: Node) -> GraphOp:
        rank = len(n.output_shapes[0])
        operands = []
        for t in n.inputs:
            c = self.const(t)
            if c is None:
                operands.append(t)
            elif c.size > 1 and self.g.learned(t):  # a parameter (a computed constant, Swin's mask, stays fixed)
                shape = c.shape
                operands.append(self.param(n, t, const_to_engine(c, rank), "bias" if n.op in ("Add", "Sub") else
                                           "norm_scale", lambda v, shape=shape: _onnx_const(v, shape)))
            else:
                operands.append(np.asarray(const_to_engine(c, rank), self.dtype))
        if len(operands) != 2:
            raise self.fail(n, "two operands")
        return Binary(n.name, n.op, operands, n.outputs[0], [len(s) for s in n.input_shapes], rank)

    # the op table's layer -> the method that builds it
    BUILDERS = {"Conv2d": "conv", "Dense": "dense", "BatchNorm2d": "batch_norm", "GroupNorm": "group_norm_node",
                "LayerNorm": "layer_norm", "Activation": "activation", "Unary": "unary", "Binary": "binary",
                "MaxPool2d": "max_pool", "AvgPool2d": "avg_pool", "GlobalAvgPool": "global_pool", "Concat": "concat",
                "Dropout": "dropout", "DropPath": "drop_path", "Move": "move", "Softmax": "softmax",
                "MatMul": "matmul", "ReduceMean": "reduce_mean", "Slice": "slice", "Gather": "gather",
                "Split": "split", "Power": "power", "Pad": "pad", "Expand": "expand", "Einsum": "einsum",
                "ReduceL2": "reduce_l2", "ScatterND": "scatter_nd", "ReduceSum": "reduce_mean"}
    # layers whose builders read their constant inputs themselves (weights, scales, operands)
    CONSTANTS_READ = ("Conv2d", "Dense", "BatchNorm2d", "GroupNorm", "LayerNorm", "Binary", "MatMul", "Einsum")

    def node(self, n: Node) -> GraphOp | list[GraphOp]:
        """The engine op of one node (Split: one per output): the builder of its layer in the op table
        (``op_table.OPS``)."""
        rule = OPS.get(n.op)
        if rule is None or not rule.trainable:
            raise self.fail(n, "prediction only: no layer of the engine trains this op")
        if n.name in self.why:
            raise self.fail(n, f"the batch cannot be followed: {self.why[n.name]}")
        made = getattr(self, self.BUILDERS[rule.layer])(n)
        sources = self.sources(n)
        return sources + (made if isinstance(made, list) else [made]) if sources else made

    def activation(self, n: Node) -> GraphOp:
        return LayerOp(n.name, n.inputs[:1], n.outputs[0], Activation(n.name, n.name, n.op.lower(), self.dtype))

    def unary(self, n: Node) -> GraphOp:
        return Unary(n.name, n.op, n.inputs[:1], n.outputs[0], n.attrs)

    def concat(self, n: Node) -> GraphOp:
        return Concat(n.name, list(n.inputs), n.outputs[0], n.attrs.get("axis", 1), len(n.output_shapes[0]))

    def dropout(self, n: Node) -> GraphOp:
        return LayerOp(n.name, n.inputs[:1], n.outputs[0],
                       Dropout(n.name, n.name, n.attrs.get("ratio", 0.5), self.rng, self.dtype))

    def drop_path(self, n: Node) -> GraphOp:
        return DropPath(n.name, n.inputs[:1], n.outputs[0], n.attrs["ratio"], self.rng, self.dtype)

    def instance_norm(self, n: Node) -> GraphOp:
        """Instance norm proper (a 4-D input): group norm with a group per channel."""
        x = n.input_shapes[0]
        if len(x) != 4 or self.const(n.inputs[1]) is None or self.const(n.inputs[2]) is None:
            raise self.fail(n, "instance norm of an image batch, with initializers for scale and offset")
        return self.group_norm(n, x[1], n.inputs[1], n.inputs[2], n.inputs[:1], n.outputs[0], x[1], lambda v: v)

    def group_norm_node(self, n: Node) -> GraphOp:
        """A ``GroupNormalization``: the graph's own, or torch's Reshape/InstanceNormalization/Reshape/Mul/Add
        export, which the importer fuses into one (``models.onnx.fuse_norm``); or an instance norm."""
        if n.op == "InstanceNormalization":
            return self.instance_norm(n)
        c = n.input_shapes[0][1]
        if any(self.const(t) is None or self.const(t).size != c for t in n.inputs[1:3]):
            raise self.fail(n, f"group norm with a scale and a bias of {c} values (one per channel) as initializers")
        shapes = n.attrs.get("initializer_shapes", ((c,), (c,)))
        return self.group_norm(n, int(n.attrs["num_groups"]), n.inputs[1], n.inputs[2], n.inputs[:1], n.outputs[0], c,
                               lambda v, shape=tuple(shapes[0]): v.reshape(shape),
                               lambda v, shape=tuple(shapes[1]): v.reshape(shape))


def _onnx_const(v: np.ndarray, shape: tuple) -> np.ndarray:
    """An engine-layout broadcast constant back to its ONNX shape."""
    if v.ndim == 4 and len(shape) >= 1:
        v = v.transpose(0, 3, 1, 2)
    return v.reshape(shape)
