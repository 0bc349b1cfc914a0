"""ONNX graph -> the ``LayerProfile`` rows of ``models/profile.py`` that the IPU memory and cost models read.

``ProfiledGraph(graph).profile(batch_size)`` answers what ``Model.profile(batch_size)`` answers for a
built-in model, with the same counting rules per kind (a multiply-add is 2 FLOPs; backward counts
twice the forward's multiply-adds for matrix layers); one rule per family of the op table (``op_table.py``):

- ``Conv``: ``conv`` (``dwconv`` when groups == in == out channels), a matrix layer with its
  ``ConvShape`` (kernel, first stride, groups, the real output size: any padding, auto_pad or
  dilation); keeps its input.
- ``Gemm`` / ``MatMul`` with a constant weight: ``dense`` (rows = all leading dimensions). A
  ``MatMul`` of two computed tensors: ``dense`` without geometry (costed at the matrix units' peak rate).
- ``Einsum``: ``dense`` without geometry, one multiply-add per combination of its letters' values; keeps its
  computed operands.
- ``BatchNormalization``, ``GroupNormalization``, ``InstanceNormalization``, ``LayerNormalization``: ``norm``.
- Activations (``Relu``, ``Clip``, ``Sigmoid``, ``HardSigmoid``, ``HardSwish``, ``Tanh``, ``Gelu``,
  ``SiLU``): ``act``. One that reads a norm's or a residual add's output alone keeps nothing (the engine
  fuses it there and recomputes), as the built-in models count it; a ReLU after a residual add is one
  FLOP per element each way (the engine's fused add + ReLU, as ``models/residual.py`` counts it). The cost model costs every ``act`` as
  the workload's activation function.
- ``Mul(x, Sigmoid(Conv(act(Conv(GlobalAveragePool(x))))))`` (torchvision's ``SqueezeExcitation``,
  ``patterns.squeeze_excite_chains``): one ``se`` row, counted as ``models/se.py`` counts it (2 + 4 per element, 4 C S per image for the two small
  products, keeps x).
- ``Add``/``Sub`` of two computed tensors of the output's shape: ``add`` (a residual add).
- ``MaxPool`` / ``AveragePool``: ``pool`` with k*k FLOPs per output; ``GlobalAveragePool`` and
  ``ReduceMean`` over H and W: ``pool`` (global).
- ``Dropout``: ``dropout``. ``DropPath`` (torch's stochastic depth, ``patterns.fuse_drop_path``): ``eltwise``,
  one FLOP per element each way, keeping one factor per sample.
- Other element-wise work, which the cost model has no special case for, is costed as generic
  element-wise work (one vector pass forward and one backward): ``Mul``/``Div`` and broadcasting
  ``Add``/``Sub`` (kind ``eltwise``), ``Softmax`` (``softmax``) and ``Concat`` (``concat``, a copy).
- ``Flatten``, ``Reshape``, ``Transpose``, ``Squeeze``, ``Unsqueeze``, ``Identity`` only move data:
  no row (as the built-in dense net's flatten).

The profile ends with the loss row of ``Model.profile``. Parameters are the graph's trainable weights
(``graph.param_inputs``: not batch norm's running statistics, not scalar constants), each counted
once. Counts scale with the batch: the graph is read at one batch size and the rows are rescaled.

Blocks (the pipeline split points): by default each node's block is its name's prefix before the first
``/`` or ``.`` (``/layer1/layer1.0/conv1/Conv`` -> ``layer1``, as torch's exporter names nodes), else the
node's name; ``blocks="node"`` makes every node a block; a list of node names starts a block at each
named node (named after it). A name that comes back after another block gets ``#2``, ``#3``...
(blocks must be contiguous runs).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence

from models.onnx.graph import load_graph
from models.onnx.ir import Graph, Node, OnnxImportError, param_inputs
from models.onnx.op_table import NORM_OPS, OPS, cost_as
from models.onnx.ops_einsum import einsum_macs, einsum_terms
from models.onnx.patterns import squeeze_excite_chains
from models.profile import ConvShape, LayerProfile


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else tuple(shape)


def _row(node: Node, block: str, kind: str, fwd: int, bwd: int, saved: int, params: int = 0, matmul=False,
         conv: ConvShape | None = None) -> LayerProfile:
    return LayerProfile(node.name, block, kind, int(fwd), int(bwd), int(params),
                        math.prod(node.output_shapes[0]), int(saved), matmul, _nhwc(node.input_shapes[0]), conv)


class _Rows:
    """The rows of one graph at the graph's own batch size."""

    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.seen: set[str] = set()
        self.producer = {t: n for n in graph.nodes for t in n.outputs}
        self.se = squeeze_excite_chains(graph.nodes, graph.initializers)
        self.in_se = {n.name for chain in self.se.values() for n in chain}

    def params(self, node: Node) -> int:
        new = [t for t in param_inputs(node, self.g.initializers) if t not in self.seen]
        self.seen.update(new)
        return sum(self.g.initializers[t].size for t in new)

    def computed(self, node: Node) -> list[int]:
        return [i for i, t in enumerate(node.inputs) if t and t not in self.g.initializers]

    def rows(self, node: Node, block: str) -> list[LayerProfile]:
        op, e = node.op, math.prod(node.output_shapes[0]) if node.output_shapes else 0
        if node.name in self.in_se:  # counted in the se row
            return []
        params = self.params(node)
        if node.name in self.se:
            return [self._se(node, block, params)]
        family = OPS[op].family if op in OPS else None
        if family == "conv":
            return [self._conv(node, block, params)]
        if family == "dense":
            return [self._dense(node, block, params)]
        if family == "norm":
            return [_row(node, block, "norm", 8 * e, 12 * e, e, params)]
        if family == "activation":
            src = self.producer.get(node.inputs[0])
            fused = src is not None and (src.op in NORM_OPS or src.op == "Add") and self._readers(node.inputs[0]) == 1
            if fused and op == "Relu" and src.op == "Add":  # the engine's add_relu: one FLOP each way
                return [_row(node, block, "act", e, e, 0, params)]
            return [_row(node, block, "act", 4 * e, 6 * e, 0 if fused else e, params)]
        if family == "binary":
            live = self.computed(node)
            if op in ("Add", "Sub") and len(live) == 2 and all(node.input_shapes[i] == node.output_shapes[0]
                                                                for i in live):
                return [_row(node, block, "add", e, e, 0, params)]
            saved = sum(math.prod(node.input_shapes[i]) for i in live) if op in ("Mul", "Div") else 0
            return [_row(node, block, "eltwise", e, e * max(1, len(live)), saved, params)]
        if family == "pool":
            k = math.prod(node.attrs["kernel_shape"])
            return [_row(node, block, "pool", k * e, e, e if op == "MaxPool" else 0, params)]
        if family == "global_pool":
            e_in = math.prod(node.input_shapes[0])
            return [_row(node, block, "pool", e_in, e_in, 0, params)]
        if family == "drop_path":  # one factor per sample, kept for backward (the built-in's residual row keeps it)
            return [_row(node, block, "eltwise", e, e, node.output_shapes[0][0], params)]
        if family == "dropout":
            return [_row(node, block, "dropout", e, e, e if node.attrs.get("ratio", 0.5) > 0 else 0, params)]
        if family == "einsum":
            try:
                terms, out = einsum_terms(node.attrs["equation"], [len(s) for s in node.input_shapes])
                macs = einsum_macs(terms, out, node.input_shapes)
            except ValueError as err:
                raise OnnxImportError(f"node {node.name!r}: {err}") from None
            saved = sum(math.prod(node.input_shapes[i]) for i in self.computed(node))
            return [_row(node, block, "dense", 2 * macs, 4 * macs, saved, params, True)]
        if family == "softmax":
            return [_row(node, block, "softmax", 5 * e, 4 * e, e, params)]
        if family == "concat":
            return [_row(node, block, "concat", 0, 0, 0, params)]
        if family == "movement":
            return []
        if family == "elementwise":
            return [_row(node, block, "eltwise", e, 2 * e, math.prod(node.input_shapes[0]), params)]
        raise OnnxImportError(f"node {node.name!r}: no profile rule for op {op}")

    def _se(self, node: Node, block: str, params: int) -> LayerProfile:
        chain = self.se[node.name]
        params += sum(self.params(n) for n in chain)
        e, (n, c, s) = math.prod(node.output_shapes[0]), (*chain[-1].output_shapes[0][:2], chain[1].input_shapes[1][1])
        small = 4 * n * c * s
        x = chain[-1].input_shapes[0]
        return LayerProfile(node.name, block, "se", 2 * e + small, 4 * e + 2 * small, params, e, e, False, _nhwc(x))

    def _readers(self, tensor: str) -> int:
        return sum(t == tensor for n in self.g.nodes for t in n.inputs)

    def _conv(self, node: Node, block: str, params: int) -> LayerProfile:
        n, cin, h, w = node.input_shapes[0]
        _, cout, ho, wo = node.output_shapes[0]
        cout_w, cin_g, kh, kw = node.input_shapes[1]
        groups = int(node.attrs.get("group", 1))
        stride = int(node.attrs.get("strides", [1, 1])[0])
        macs = n * ho * wo * cout * kh * kw * cin_g
        kind = "dwconv" if groups == cin == cout else "conv"
        shape = ConvShape(n, (h, w), cin, cout, (kh, kw), stride, groups, out_hw=(ho, wo))
        return _row(node, block, kind, 2 * macs, 4 * macs, n * cin * h * w, params, True, shape)

    def _dense(self, node: Node, block: str, params: int) -> LayerProfile:
        a, b = node.input_shapes[0], node.input_shapes[1]
        weight = node.inputs[1] in self.g.initializers
        if node.op == "Gemm":
            k = a[0] if node.attrs.get("transA", 0) else a[1]
            out = b[0] if node.attrs.get("transB", 0) else b[1]
            rows = math.prod(a) // k
        else:
            k, out = a[-1], b[-1]
            rows = math.prod(a[:-1]) if len(b) <= 2 else math.prod(node.output_shapes[0]) // out
        macs = rows * k * out
        if not weight:  # a product of two computed tensors: no geometry
            saved = math.prod(a) + math.prod(b)
            return _row(node, block, "dense", 2 * macs, 4 * macs, saved, params, True)
        return _row(node, block, "dense", 2 * macs, 4 * macs, rows * k, params, True, ConvShape(rows, (1, 1), k, out))


def _prefix(name: str) -> str:
    head = re.split(r"[/.]", name.lstrip("/"), maxsplit=1)[0]
    return head or name


class ProfiledGraph:
    """A network read from ONNX, with the model contract the IPU side uses: ``name``, ``input_shape``
    (H, W, C), ``num_classes``, ``blocks()``, ``profile(batch_size)``."""

    def __init__(self, graph: Graph, blocks: str | Sequence[str] = "prefix", num_classes: int | None = None,
                 name: str | None = None) -> None:
        self.graph, self.name = graph, name or graph.name
        n, c, h, w = graph.input_shape
        self.input_shape = (h, w, c)
        out = graph.output_shapes[0] if graph.output_shapes else ()
        if len(graph.outputs) != 1 or len(out) != 2 or out[0] != n:
            raise OnnxImportError(f"{self.name}: the graph's output must be the logits of one image batch "
                                  f"[{n}, classes]; got outputs {list(graph.outputs)} of shapes "
                                  f"{[list(s) for s in graph.output_shapes]}")
        self.num_classes = out[1]
        if num_classes is not None and num_classes != self.num_classes:
            raise OnnxImportError(f"{self.name}: the graph's classifier has {self.num_classes} classes, "
                                  f"not {num_classes}")
        builder = _Rows(graph)
        names = self._block_names(blocks)
        self._rows: list[LayerProfile] = []
        for node in graph.nodes:
            self._rows += builder.rows(node, names[node.name])
        if not self._rows:
            raise OnnxImportError(f"{self.name}: the graph has no layer to profile")
        self._rows = _contiguous(self._rows)
        e = math.prod(out)
        self._rows.append(LayerProfile("loss", self._rows[-1].block, "loss", 6 * e, 3 * e, 0, n, e, False))

    def _block_names(self, blocks) -> dict[str, str]:
        nodes = self.graph.nodes
        if blocks == "prefix":
            return {n.name: _prefix(n.name) for n in nodes}
        if blocks == "node":
            return {n.name: n.name for n in nodes}
        if isinstance(blocks, str):
            raise ValueError(f"{self.name}: blocks must be 'prefix', 'node' or a list of node names, got {blocks!r}")
        known = [n.name for n in nodes]
        unknown = [b for b in blocks if b not in known]
        if unknown:
            raise OnnxImportError(f"{self.name}: split nodes {unknown} are not nodes of the graph "
                                  f"(nodes: {', '.join(known[:20])}{' ...' if len(known) > 20 else ''})")
        out, current = {}, nodes[0].name
        for n in nodes:
            current = n.name if n.name in blocks else current
            out[n.name] = current
        return out

    def blocks(self) -> list[str]:
        return list(dict.fromkeys(r.block for r in self._rows))

    def param_count(self) -> int:
        return sum(r.params for r in self._rows)

    def profile(self, batch_size: int) -> list[LayerProfile]:
        """Per-layer counts for ``batch_size`` images, ending with the loss (``Model.profile``)."""
        n0 = self.graph.input_shape[0]
        if batch_size == n0:
            return list(self._rows)
        return [_rebatch(r, n0, batch_size) for r in self._rows]


def _contiguous(rows: list[LayerProfile]) -> list[LayerProfile]:
    seen: dict[str, int] = {}
    out, previous, current = [], None, None
    for r in rows:
        if r.block != previous:
            previous = r.block
            seen[r.block] = seen.get(r.block, 0) + 1
            current = r.block if seen[r.block] == 1 else f"{r.block}#{seen[r.block]}"
        out.append(dataclasses.replace(r, block=current))
    return out


def _scale(count: int, n0: int, n: int) -> int:
    if count % n0:
        raise OnnxImportError(f"a count {count} of the graph at batch {n0} is not per-sample; "
                              f"read the graph with batch_size={n}")
    return count // n0 * n


def _rebatch(r: LayerProfile, n0: int, n: int) -> LayerProfile:
    conv = r.conv and dataclasses.replace(r.conv, batch=_scale(r.conv.batch, n0, n))
    shape = (n, *r.in_shape[1:]) if r.in_shape and r.in_shape[0] == n0 else r.in_shape
    return dataclasses.replace(r, flops_fwd=_scale(r.flops_fwd, n0, n), flops_bwd=_scale(r.flops_bwd, n0, n),
                               activation_elems=_scale(r.activation_elems, n0, n),
                               saved_elems=_scale(r.saved_elems, n0, n), in_shape=shape, conv=conv)


def cost_workload(graph: Graph) -> dict[str, object]:
    """What the profile rows do not say and the cost model needs (the fields of ``ipu.plan.Workload``): the
    commonest activation (``cost_as`` relu: relu, swish otherwise, the transcendental one) and its norm (batch
    norm, or group norm with its groups). Two-pass norm statistics (Poplar's stable_norm) for group norm and
    for swish networks, as the EfficientNet recipe sets them and the built-in EfficientNets are costed;
    single-pass for ReLU networks with batch norm, as the MLPerf ResNet configs."""
    ops = Counter(n.op for n in graph.nodes)
    relu, swish = (sum(ops[o] for o in cost_as(kind)) for kind in ("relu", "swish"))
    activation = "relu" if relu >= swish else "swish"
    if sum(ops[o] for o in cost_as("batch")) >= sum(ops[o] for o in cost_as("group")):
        return {"activation": activation, "norm": "batch", "norm_groups": 32, "drop_connect": False,
                "stable_norm": activation == "swish"}
    groups = Counter(int(n.attrs.get("num_groups", 1)) for n in graph.nodes if n.op == "GroupNormalization")
    return {"activation": activation, "norm": "group", "norm_groups": groups.most_common(1)[0][0] if groups else 1,
            "drop_connect": False, "stable_norm": True}


def onnx_profile(source, batch_size: int, image_size: int | tuple[int, int] | None = None,
                 num_classes: int | None = None, blocks: str | Sequence[str] = "prefix") -> list[LayerProfile]:
    """The ``LayerProfile`` rows of the ONNX network ``source`` (path or ModelProto) for ``batch_size``
    images of ``image_size`` (where the graph does not fix it); raises ``OnnxImportError`` /
    ``UnsupportedOpError`` (ValueErrors with one-line messages) for bad input."""
    graph = load_graph(source, image_size=image_size, batch_size=batch_size)
    return ProfiledGraph(graph, blocks, num_classes).profile(batch_size)
