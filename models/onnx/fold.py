"""Constant folding for ``graph.py``: a numpy evaluator of the shape arithmetic that exporters emit
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` for a flatten, ``Constant`` nodes, casts, slices),
and the attribute normalisation that hides opset differences from the importer's users.

A node is folded when every input is a constant (an initializer, a ``Constant`` or an earlier folded
value) or, for ``Shape``, when its input's shape is static. Only the ops in ``EVALUATORS`` fold; a node
of another op with constant inputs stays a node.
"""

from __future__ import annotations

import math

import numpy as np
from models.onnx.lazy_onnx import helper, numpy_helper, onnx


def _root(value: np.float32) -> float | None:
    """The square root of an integer k = 2..4096 (not a square) or its inverse that float32 rounds to
    ``value``, else None: the scales attention writes (``head_dim ** -0.5``), which a model holds as Python
    floats and the graph keeps only in float32."""
    v = float(value)
    if v <= 0:
        return None
    for root, k in ((math.sqrt, round(v * v)), (lambda k: k ** -0.5, round(1 / (v * v)))):
        if 2 <= k <= 4096 and math.isqrt(k) ** 2 != k and np.float32(root(k)) == value:
            return root(k)
    return None


def decimal(value) -> float:
    """A float32 number as the value the exporting framework held: the shortest decimal that rounds to it
    (1e-3, not 0.0010000000474974513), or where that decimal has all of float32's digits and the number is
    float32's rounding of a square root or its inverse (``_root``: 0.17677669, MaxViT's 32 ** -0.5), that root
    in float64. ONNX stores float attributes (epsilon, momentum, alpha) and scalar operands (Dropout's ratio, an
    attention's scale) in float32; the engine's layers then compute with the value a model built in the layer
    API or in torch holds: the same bits."""
    text = str(np.float32(value))
    digits = len(text.lstrip("-0.").replace(".", "").split("e")[0].rstrip("0"))
    root = _root(np.float32(value)) if digits >= 7 else None
    return float(text) if root is None else root


def attribute_values(node: onnx.NodeProto) -> dict:
    """A node's attributes as plain Python: numbers, strings, lists, numpy arrays for tensors; floats as
    the decimals they stand for (``decimal``)."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.type == onnx.AttributeProto.FLOAT:
            v = decimal(v)
        elif a.type == onnx.AttributeProto.FLOATS:
            v = [decimal(x) for x in v]
        elif isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _axes(attrs, inputs, i):
    if len(inputs) > i and inputs[i] is not None:
        return [int(a) for a in np.asarray(inputs[i]).reshape(-1)]
    return list(attrs.get("axes", []))


def _unsqueeze(x, attrs, inputs):
    axes = _axes(attrs, inputs, 1)
    rank = x.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        x = np.expand_dims(x, a)
    return x


def _squeeze(x, attrs, inputs):
    axes = _axes(attrs, inputs, 1)
    return np.squeeze(x, tuple(a % x.ndim for a in axes)) if axes else np.squeeze(x)


def _slice(x, attrs, inputs, opset):
    if opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes, steps = attrs.get("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = list(inputs[1]), list(inputs[2])
        axes = list(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
        steps = list(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a) % x.ndim] = slice(int(s), int(e), int(st))
    return x[tuple(index)]


def _reshape(x, shape, allowzero=0):
    shape = [int(s) for s in shape]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _divide(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        return np.trunc(a / b).astype(np.result_type(a, b))
    return a / b


def _reduce_prod(x, attrs, inputs):
    axes = _axes(attrs, inputs, 1)
    return np.prod(x, axis=tuple(axes) if axes else None, keepdims=bool(attrs.get("keepdims", 1)))


def _constant(attrs):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in attrs:
            v = attrs[key]
            dtype = np.float32 if "float" in key else np.int64 if "int" in key else None
            return np.asarray(v, dtype=dtype)
    raise ValueError(f"Constant with attributes {sorted(attrs)} is not supported (only numeric values)")


def _scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction != "none":
        raise ValueError(f"ScatterND with reduction {reduction!r} is not supported (only 'none')")
    out = data.copy()
    out[tuple(np.moveaxis(indices, -1, 0))] = updates
    return out


EVALUATORS = {
    "Constant": lambda a, i, o: _constant(a),
    "Identity": lambda a, i, o: i[0],
    "Cast": lambda a, i, o: i[0].astype(helper.tensor_dtype_to_np_dtype(a["to"])),
    "Gather": lambda a, i, o: np.take(i[0], i[1], axis=a.get("axis", 0)),
    "Concat": lambda a, i, o: np.concatenate([np.atleast_1d(x) if x.ndim == 0 else x for x in i], axis=a["axis"]),
    "Unsqueeze": lambda a, i, o: _unsqueeze(i[0], a, i),
    "Squeeze": lambda a, i, o: _squeeze(i[0], a, i),
    "Slice": lambda a, i, o: _slice(i[0], a, i, o),
    "Reshape": lambda a, i, o: _reshape(i[0], i[1] if len(i) > 1 else a["shape"], a.get("allowzero", 0)),
    "Flatten": lambda a, i, o: i[0].reshape(int(np.prod(i[0].shape[:a.get("axis", 1) % max(1, i[0].ndim)])), -1),
    "Transpose": lambda a, i, o: np.transpose(i[0], a.get("perm")),
    "Add": lambda a, i, o: i[0] + i[1],
    "Sub": lambda a, i, o: i[0] - i[1],
    "Mul": lambda a, i, o: i[0] * i[1],
    "Div": lambda a, i, o: _divide(i[0], i[1]),
    "Neg": lambda a, i, o: -i[0],
    "Not": lambda a, i, o: np.logical_not(i[0]),
    "ScatterND": lambda a, i, o: _scatter_nd(i[0], i[1], i[2], a.get("reduction", "none")),
    "Mod": lambda a, i, o: np.fmod(i[0], i[1]) if a.get("fmod", 0) else np.mod(i[0], i[1]),
    "Floor": lambda a, i, o: np.floor(i[0]),
    "Ceil": lambda a, i, o: np.ceil(i[0]),
    "Sqrt": lambda a, i, o: np.sqrt(i[0]),
    "Pow": lambda a, i, o: np.power(np.asarray(i[0], np.float64), i[1]).astype(i[0].dtype),
    "Reciprocal": lambda a, i, o: 1 / i[0],
    "Equal": lambda a, i, o: np.equal(i[0], i[1]),
    "Where": lambda a, i, o: np.where(i[0], i[1], i[2]),
    "Max": lambda a, i, o: np.maximum.reduce(i),
    "Min": lambda a, i, o: np.minimum.reduce(i),
    "Expand": lambda a, i, o: i[0] * np.ones([int(s) for s in i[1]], i[0].dtype),
    "Range": lambda a, i, o: np.arange(i[0], i[1], i[2]).astype(np.result_type(i[0])),
    "ConstantOfShape": lambda a, i, o: np.full([int(s) for s in i[0]], a["value"].reshape(-1)[0] if "value" in a
                                               else np.float32(0), dtype=a["value"].dtype if "value" in a
                                               else np.float32),
    "ReduceProd": lambda a, i, o: _reduce_prod(i[0], a, i),
    "Tile": lambda a, i, o: np.tile(i[0], [int(r) for r in i[1]]),
}


def evaluate(op: str, attrs: dict, inputs: list, opset: int) -> np.ndarray:
    """The value of a node whose inputs are all constants (None for an omitted optional input)."""
    return np.asarray(EVALUATORS[op](attrs, inputs, opset))


def exact_value(op: str, attrs: dict, inputs: list, opset: int) -> np.ndarray | None:
    """A folded float value in float64 where it is computed from integers (shapes) and small float constants
    only, as the exporting framework computed it in Python (an attention's scale, ``head_dim ** -0.5`` or
    ``sqrt(1 / sqrt(head_dim))``, is a float32 constant in the graph): ``inputs`` hold the float64 values known so
    far; None where a float input has none (a float32 value of the file)."""
    if op == "Constant":
        value = evaluate(op, attrs, inputs, opset)
        if value.size > 16 or not np.issubdtype(value.dtype, np.floating):
            return None
        return np.array([decimal(v) for v in value.reshape(-1)], np.float64).reshape(value.shape)
    if any(a is not None and np.issubdtype(a.dtype, np.floating) and a.dtype != np.float64 for a in inputs):
        return None
    if op == "Cast":
        return np.asarray(inputs[0], np.float64)
    value = evaluate(op, attrs, inputs, opset)
    return value.astype(np.float64) if np.issubdtype(value.dtype, np.floating) else None


# Inputs that an opset passes as constant tensors and an older one as attributes: the importer moves
# them into the node's attributes (op -> {input index: attribute name}), so that a node reads the same at
# every opset. Clip's min/max stay None when absent.
INPUTS_AS_ATTRIBUTES = {
    "Clip": {1: "min", 2: "max"},
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "ReduceMean": {1: "axes"},
    "ReduceL2": {1: "axes"},
    "ReduceSum": {1: "axes"},
    "Dropout": {1: "ratio", 2: "training_mode"},
    "Reshape": {1: "shape"},
}


def as_attribute(op: str, key: str, value: np.ndarray):
    value = np.asarray(value)
    if key in ("axes", "shape"):
        return [int(v) for v in value.reshape(-1)]
    if key == "training_mode":
        return bool(value)
    return decimal(value) if value.dtype == np.float32 else float(value)
