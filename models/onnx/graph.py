"""Read an ONNX network into a neutral, framework-free list of nodes.

``load_graph(source, image_size=None, batch_size=None)`` takes a path or an ``onnx.ModelProto`` and:

1. reads it with ``onnx.load`` (an unreadable or truncated file: one line naming the file);
2. checks the model's opset against the installed ``onnx`` (newer: one line) and every node's op
   against ``SUPPORTED_OPS``;
3. runs ``onnx.checker`` and, after fixing the input's dynamic dimensions, ``onnx.shape_inference``
   (strict, with data propagation; the model's own opset is honoured);
4. folds constant subgraphs (``fold.py``) and infers shapes again, until nothing more folds;
5. recognises SiLU written as ``Mul(x, Sigmoid(x))`` and HardSwish as ``Mul(x, HardSigmoid(x))``, torch's
   group norm chain as one ``GroupNormalization`` (``fuse_norm.py``) and torch's stochastic depth
   (``RandomUniformLike``, ``Less``, ``Cast``, ``Div``, ``Mul``) as one ``DropPath`` node whose ``ratio`` is
   the drop probability (``patterns.fuse_drop_path``).

Every node that cannot import (an unknown op; a constant-only op whose value is computed; a random op outside
stochastic depth) is one ``Blocker``, and all of them are one ``UnsupportedOpError`` at the end (its
``blockers``), naming each op, its count, its first nodes and the export that fixes it where one does, and the
supported list; where an unknown op stops the steps above (shape inference), the error names the unknown ops.

The input must be one image batch ``[N, C, H, W]``. ``image_size`` (an int or ``(H, W)``) sets H and W,
fixed or not; ``batch_size`` sets N where it is dynamic (a fixed N stays: counts scale per sample). A
dynamic dimension that the options do not fix is an error. Every tensor of the result has a static shape.
"""

from __future__ import annotations

import os

import numpy as np
from models.onnx.lazy_onnx import numpy_helper, onnx, shape_inference

from models.onnx.fold import EVALUATORS, INPUTS_AS_ATTRIBUTES, as_attribute, attribute_values, evaluate, exact_value
from models.onnx.fuse_norm import fuse_group_norm
from models.onnx.ir import Blocker, Graph, Node, OnnxImportError, UnsupportedOpError, blockers_text, param_inputs
from models.onnx.op_table import DROP_PATH_PARTS, EXPORT_FIXES, ONNX_OPS, RESHAPES, patterns_text
from models.onnx.patterns import fuse_drop_path

# Ops that become layers (or profile rows): the op table's (``op_table.py``).
COMPUTE_OPS = ONNX_OPS
# Ops that only compute constants: supported when folding removes them.
CONSTANT_OPS = frozenset(EVALUATORS) | {"Shape"}
# Ops supported only inside torch's stochastic depth (``patterns.fuse_drop_path``): a per-sample random mask.
DROP_PATH_OPS = frozenset(DROP_PATH_PARTS)
SUPPORTED_OPS = tuple(sorted(COMPUTE_OPS | CONSTANT_OPS | DROP_PATH_OPS))
FOLD_ROUNDS = 8  # constant folding and shape inference, again while they fold more


def read_model(source) -> onnx.ModelProto:
    """The model of a path or a ModelProto (copied); one line for a file that cannot be read."""
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        return model
    path = os.fspath(source)
    try:
        model = onnx.load(path)
    except OSError as e:
        raise OnnxImportError(f"{path}: cannot read the file ({e.strerror or e})") from None
    except Exception as e:  # protobuf's DecodeError and friends
        raise OnnxImportError(f"{path}: not a readable ONNX model (truncated or corrupt file: "
                              f"{_line(e)})") from None
    if not model.graph.node:
        raise OnnxImportError(f"{path}: not a readable ONNX model (no graph nodes; truncated or corrupt file?)")
    return model


def _line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _opset(model: onnx.ModelProto, where: str) -> int:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise OnnxImportError(f"{where}: the model imports no version of the default ONNX opset")
    known = onnx.defs.onnx_opset_version()
    if versions[0] > known:
        raise OnnxImportError(f"{where}: opset {versions[0]} is newer than the installed onnx {onnx.__version__} "
                              f"knows (up to {known}); export with opset <= {known}")
    return versions[0]


def blocker(node, why: str = "") -> Blocker:
    """The blocker of a node (an ``onnx.NodeProto`` or a ``Node``) whose op cannot run here, with its export fix."""
    if isinstance(node, Node):
        op, name, inputs = node.op, node.name, node.inputs
    else:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        name, inputs = node.name or "(unnamed)", node.input
    return Blocker(op, name, why, EXPORT_FIXES.get(op, ""), tuple(inputs))


def refuse(blockers: list[Blocker], where: str) -> None:
    """One ``UnsupportedOpError`` for every node of ``blockers`` (none: nothing); the error keeps them."""
    if blockers:
        raise UnsupportedOpError(f"{where}: unsupported ONNX op{'s,' if len(blockers) > 1 else ''} "
                                 f"{blockers_text(blockers)}; supported: {', '.join(SUPPORTED_OPS)} "
                                 f"(and {patterns_text()})", blockers)


def _unknown(node) -> bool:
    return node.domain not in ("", "ai.onnx") or node.op_type not in SUPPORTED_OPS


def unknown_ops(model: onnx.ModelProto) -> list[Blocker]:
    """The blocker of every node whose op is not in ``SUPPORTED_OPS``."""
    return [blocker(node, "not an op of the op table (models/onnx/op_table.py)") for node in model.graph.node
            if _unknown(node)]


def check_ops(model: onnx.ModelProto, where: str = "model") -> None:
    """One ``UnsupportedOpError`` for every node whose op is not in ``SUPPORTED_OPS``."""
    refuse(unknown_ops(model), where)


def _dims(value_info) -> list:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in t.shape.dim]


def _fix_input(model, where, image_size, batch_size) -> tuple[str, tuple[int, int, int, int]]:
    init = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    if len(inputs) != 1:
        raise OnnxImportError(f"{where}: expected one graph input (an image batch [N, C, H, W]), "
                              f"got {len(inputs)}: {[i.name for i in inputs]}")
    x = inputs[0]
    dims = _dims(x)
    if len(dims) != 4 or x.type.tensor_type.elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                                                              onnx.TensorProto.FLOAT16):
        raise OnnxImportError(f"{where}: graph input {x.name!r} of shape {dims} is not an image batch "
                              f"[N, C, H, W] of floats")
    if isinstance(dims[1], int) and isinstance(dims[3], int) and dims[3] in (1, 3) and dims[1] > 4:
        raise OnnxImportError(f"{where}: graph input {x.name!r} of shape {dims} looks channels-last; expected an "
                              f"image batch [N, C, H, W]")
    hw = (image_size, image_size) if isinstance(image_size, int) else image_size
    wanted = [dims[0] if isinstance(dims[0], int) else batch_size, dims[1],
              *(hw if hw is not None else dims[2:])]
    for axis, (v, what) in enumerate(zip(wanted, ("batch size (batch_size)", "channels", "height (image_size)",
                                                  "width (image_size)"))):
        if not isinstance(v, int) or v < 1:
            raise OnnxImportError(f"{where}: graph input {x.name!r} of shape {dims}: dimension {axis} "
                                  f"({dims[axis]!r}) is dynamic; give the {what}")
        x.type.tensor_type.shape.dim[axis].Clear()
        x.type.tensor_type.shape.dim[axis].dim_value = v
    return x.name, tuple(wanted)


def _infer(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    del model.graph.value_info[:]
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:  # inferred again from the fixed input
            d.Clear()
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as e:
        raise OnnxImportError(f"{where}: shape inference failed: {_line(e)}") from None


def _shapes(model: onnx.ModelProto) -> dict[str, list]:
    g = model.graph
    out = {t.name: list(t.dims) for t in g.initializer}
    for v in [*g.input, *g.value_info, *g.output]:
        out[v.name] = _dims(v)
    return out


def _fold(model: onnx.ModelProto, opset: int, where: str, origins: dict[str, str],
          transposed: dict[str, tuple[str, tuple[int, ...]]], folded: set[str],
          exact: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """Replace every node whose value is constant by an initializer; ``origins`` gains the file's initializer
    of each folded value that only reshapes one (``op_table.RESHAPES``), ``transposed`` the initializer and the
    permutation of each that transposes one (torch's ``Linear`` on more than two axes: ``MatMul(x,
    Transpose(weight))``), ``folded`` the name of every folded value."""
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    files = set(consts) - folded  # the file's initializers (an earlier round's folded values are not)
    shapes = _shapes(model)
    keep = []
    for node in g.node:
        attrs = attribute_values(node)
        args = [consts.get(t) if t else None for t in node.input]
        value = None
        if _reads_parameter(node, consts, files, origins, transposed):
            keep.append(node)  # a parameter's broadcast or gather: it trains, its gradient flows back
            continue
        try:
            if node.op_type == "Shape" and all(isinstance(d, int) for d in shapes.get(node.input[0], ["?"])):
                dims = shapes[node.input[0]]
                value = np.array(dims[attrs.get("start", 0):attrs.get("end", len(dims))], np.int64)
            elif node.op_type in EVALUATORS and all(a is not None for t, a in zip(node.input, args) if t):
                value = evaluate(node.op_type, attrs, args, opset)
        except Exception as e:
            raise OnnxImportError(f"{where}: cannot fold constant node {node.name!r} ({node.op_type}): "
                                  f"{_line(e)}") from None
        if value is None or len(node.output) != 1:
            keep.append(node)
            continue
        consts[node.output[0]] = value
        folded.add(node.output[0])
        if exact is not None and np.issubdtype(np.asarray(value).dtype, np.floating):
            value64 = exact_value(node.op_type, attrs, [exact.get(t, a) for t, a in zip(node.input, args)], opset)
            if value64 is not None:
                exact[node.output[0]] = value64
        source = origins.get(node.input[0], node.input[0]) if node.input else None
        if node.op_type in RESHAPES and source in files and np.size(value) == np.size(consts[node.input[0]]):
            origins[node.output[0]] = source
        elif node.op_type == "Transpose" and node.input[0] in files:
            transposed[node.output[0]] = (node.input[0], tuple(attrs.get("perm", range(value.ndim - 1, -1, -1))))
        g.initializer.append(numpy_helper.from_array(np.asarray(value), node.output[0]))
    initialized = {t.name for t in g.initializer}
    used = {t for n in keep for t in n.input} | {o.name for o in g.output}
    kept_init = [t for t in g.initializer if t.name in used]
    del g.node[:], g.initializer[:]
    g.node.extend(keep)
    g.initializer.extend(kept_init)
    names = {t.name for t in kept_init}
    graph_inputs = [i for i in g.input if i.name not in initialized or i.name in names]
    del g.input[:]
    g.input.extend(graph_inputs)
    return model


def _reads_parameter(node, consts: dict, files: set, origins: dict, transposed: dict) -> bool:
    """Whether a node computes from one of the file's float initializers (a parameter: ViT's class token that
    ``Expand`` broadcasts, Swin's relative position bias table that ``Gather`` reads): it stays a node, so that the
    parameter trains. Its shape, a reshape (``op_table.RESHAPES``) or a transpose of it still fold: those keep
    naming the initializer (``origins``, ``transposed``)."""
    if node.op_type == "Shape" or node.op_type in RESHAPES or (node.op_type == "Transpose" and node.input[0] in files):
        return False
    return any(t in origins or t in transposed or (t in files and np.issubdtype(consts[t].dtype, np.floating))
               for t in node.input if t)


def _static(name: str, shapes: dict, node, where: str) -> tuple[int, ...]:
    dims = shapes.get(name)
    if dims is None or not all(isinstance(d, int) for d in dims):
        raise OnnxImportError(f"{where}: tensor {name!r} of node {node.name!r} ({node.op_type}) has a dynamic "
                              f"shape {dims} that the options (image_size, batch_size) do not fix")
    return tuple(dims)


def _nodes(model: onnx.ModelProto, shapes: dict, consts: dict, where: str, blockers: list[Blocker]) -> list[Node]:
    """The graph's nodes; a node that cannot import adds to ``blockers`` (those of unknown ops are there already)."""
    out = []
    for node in model.graph.node:
        if _unknown(node):
            continue
        if node.op_type in CONSTANT_OPS and node.op_type not in COMPUTE_OPS | DROP_PATH_OPS:
            blockers.append(blocker(node, "supported only where its value is a constant; here it is not"))
            continue
        attrs = attribute_values(node)
        moved = INPUTS_AS_ATTRIBUTES.get(node.op_type, {})
        inputs = []
        for i, t in enumerate(node.input):
            if i in moved and t:
                if t not in consts:
                    raise OnnxImportError(f"{where}: node {node.name!r} ({node.op_type}): input {i} ({t!r}) "
                                          f"must be a constant")
                attrs[moved[i]] = as_attribute(node.op_type, moved[i], consts[t])
            elif i not in moved:
                inputs.append(t)
        outputs = [t for t in node.output if t]
        if node.op_type == "Dropout":
            outputs = outputs[:1]
        out.append(Node(node.op_type, node.name or f"{node.op_type}_{len(out)}", tuple(inputs), tuple(outputs),
                        tuple(_static(t, shapes, node, where) if t else () for t in inputs),
                        tuple(_static(t, shapes, node, where) for t in outputs), attrs))
    return out


def _fuse(nodes: list[Node], graph_outputs) -> list[Node]:
    """SiLU = Mul(x, Sigmoid(x)) and HardSwish = Mul(x, HardSigmoid(x; 1/6, 1/2)), when the gate
    feeds only that Mul."""
    readers: dict[str, int] = {}
    for n in nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    by_output = {n.outputs[0]: n for n in nodes if n.outputs}
    fused, drop = {}, set()
    for n in nodes:
        if n.op != "Mul" or len(n.inputs) != 2:
            continue
        for gate_t, x in (n.inputs, n.inputs[::-1]):
            gate = by_output.get(gate_t)
            if gate is None or gate.inputs[:1] != (x,) or readers.get(gate_t) != 1 or gate_t in graph_outputs:
                continue
            if gate.op == "Sigmoid":
                op = "SiLU"
            elif gate.op == "HardSigmoid" and abs(gate.attrs.get("alpha", 0.2) - 1 / 6) < 1e-6 \
                    and abs(gate.attrs.get("beta", 0.5) - 0.5) < 1e-6:
                op = "HardSwish"
            else:
                continue
            fused[id(n)] = Node(op, n.name, (x,), n.outputs, gate.input_shapes, n.output_shapes, {})
            drop.add(id(gate))
            break
    return [fused.get(id(n), n) for n in nodes if id(n) not in drop]


def load_graph(source, image_size: int | tuple[int, int] | None = None, batch_size: int | None = None,
               where: str | None = None) -> Graph:
    """The network of ``source`` (a path or an ``onnx.ModelProto``) as a ``Graph``; see the module doc.
    ``where``: how errors name the source (default: the path, or the model's graph name)."""
    model = read_model(source)
    if where is None:
        where = str(source) if not isinstance(source, onnx.ModelProto) else (model.graph.name or "model")
    opset = _opset(model, where)
    if model.functions:
        from onnx import inliner
        model = inliner.inline_local_functions(model)
    blockers = unknown_ops(model)
    try:
        graph = _read(model, where, opset, image_size, batch_size, blockers)
    except UnsupportedOpError:
        raise
    except OnnxImportError:
        refuse(blockers, where)  # what stopped the reader is most likely an op it does not know: name them all
        raise
    refuse(blockers, where)
    return graph


def _read(model: onnx.ModelProto, where: str, opset: int, image_size, batch_size,
          blockers: list[Blocker]) -> Graph | None:
    """``load_graph`` past the op check; ``blockers`` gains every node that cannot import (the caller refuses
    them all at once)."""
    if not blockers:
        try:
            onnx.checker.check_model(model)
        except Exception as e:
            raise OnnxImportError(f"{where}: not a valid ONNX model: {_line(e)}") from None
    name, input_shape = _fix_input(model, where, image_size, batch_size)
    origins: dict[str, str] = {}
    transposed: dict[str, tuple[str, tuple[int, ...]]] = {}
    folded: set[str] = set()
    exact: dict[str, np.ndarray] = {}
    model = _infer(model, where)
    for _ in range(FOLD_ROUNDS):  # a shape known only once a slice's bounds are folded folds in the next round
        count = len(model.graph.node)
        model = _infer(_fold(model, opset, where, origins, transposed, folded, exact), where)
        if len(model.graph.node) == count:
            break
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consts.update((t, v) for t, v in exact.items() if t in consts)  # shape arithmetic in float64, as torch's
    shapes = {k: v for k, v in _shapes(model).items()}
    outs = {o.name for o in model.graph.output}
    nodes = fuse_group_norm(_fuse(_nodes(model, shapes, consts, where, blockers), outs), consts, outs)
    nodes = fuse_drop_path(nodes, consts)
    blockers += [blocker(n, "supported only in torch's stochastic depth, or where its value is a constant; here it "
                            "is neither") for n in nodes if n.op in DROP_PATH_OPS]
    if blockers:
        return None  # load_graph refuses them
    params: list[str] = []
    for n in nodes:
        params += [t for t in param_inputs(n, consts) if t not in params]
    outputs = tuple(o.name for o in model.graph.output)
    for t in outputs:
        if t in consts:
            raise OnnxImportError(f"{where}: graph output {t!r} is a constant, not computed from the input")
    out_shapes = tuple(_static(t, shapes, model.graph.node[-1], where) for t in outputs)
    return Graph(model.graph.name or os.path.basename(where), name, input_shape, outputs, out_shapes, nodes,
                 consts, params, opset, {k: tuple(v) for k, v in shapes.items() if all(isinstance(d, int) for d in v)},
                 origins, transposed, frozenset(folded))
