"""Runs of the graph model's ops that the layer API computes as one layer, merged into that layer, so that
an imported network does the built-in model's arithmetic (the same kernels in the same order: the same
bits) and keeps fewer tensors.

- ``fuse_norm_act``: a batch or group norm whose output only a SiLU or ReLU reads takes that activation
  into its kernel (``act``), as the built-in models' norms do (the activation of the rounded norm output
  would differ by an ulp).
- ``fuse_squeeze_excite``: ``Mul(x, Sigmoid(Conv(SiLU(Conv(GlobalAveragePool(x))))))`` with 1x1
  convolutions with biases (``patterns.squeeze_excite_chains``) becomes the engine's
  ``SqueezeExcitation`` layer, holding the two convolutions' parameters (their initializers' names and
  layouts: OIHW ``[S, C, 1, 1]`` and ``[C, S, 1, 1]``, as ``models/se.py``). Six ops compute it with
  other roundings (a 1x1 convolution of a 1x1 image is not the layer's small matrix product).
- ``fuse_channels_last``: torch's channels-last layer norm (``Transpose``, layer norm of the last axis,
  ``Transpose`` back: ConvNeXt's ``LayerNorm2d``) becomes one ``LayerNorm`` of the engine's NHWC channels: the
  same values without the two transposed copies.
"""

from __future__ import annotations

import numpy as np

from models.activation import Activation
from models.conv import Conv2d
from models.norm import ACTS, BatchNorm2d, GroupNorm
from models.onnx.ops import Binary, LayerOp, GraphOp, Move
from models.onnx.ops_norm import LayerNorm
from models.onnx.patterns import squeeze_excite_chains
from models.pool import GlobalAvgPool
from models.se import SqueezeExcitation


def _readers(ops: list[GraphOp]) -> dict[str, list[GraphOp]]:
    out: dict[str, list[GraphOp]] = {}
    for op in ops:
        for t in op.inputs:
            out.setdefault(t, []).append(op)
    return out


def fuse_norm_act(ops: list[GraphOp], output: str) -> list[GraphOp]:
    readers = _readers(ops)
    dropped = set()
    for op in ops:
        layer = op.layer if isinstance(op, LayerOp) else None
        if not isinstance(layer, (BatchNorm2d, GroupNorm)) or layer.act != ACTS[None] or op.output == output \
                or getattr(op, "as_rank4", False):
            continue
        after = readers.get(op.output, [])
        act = after[0].layer if len(after) == 1 and isinstance(after[0], LayerOp) else None
        if isinstance(act, Activation) and act.fn in ("silu", "relu"):
            layer.act = ACTS[act.fn]
            op.output = after[0].output
            dropped.add(id(after[0]))
    return [op for op in ops if id(op) not in dropped]


def _pointwise(op: GraphOp | None) -> Conv2d | None:
    layer = op.layer if isinstance(op, LayerOp) else None
    if isinstance(layer, Conv2d) and layer.path == "pointwise" and layer.bias is not None:
        return layer
    return None


def _is(op: GraphOp | None, cls, fn: str | None = None) -> bool:
    layer = op.layer if isinstance(op, LayerOp) else None
    return isinstance(layer, cls) and (fn is None or layer.fn == fn)


def fuse_squeeze_excite(ops: list[GraphOp], graph, dtype) -> list[GraphOp]:
    """``graph``: the ``Graph`` the ops were built from (its node names are the ops' names)."""
    by_name = {op.name: op for op in ops}
    replace, dropped = {}, set()
    for mul_name, chain in squeeze_excite_chains(graph.nodes, graph.initializers).items():
        mul = by_name.get(mul_name)
        gate, conv2, act, conv1, pool = (by_name.get(n.name) for n in chain)
        c1, c2 = _pointwise(conv1), _pointwise(conv2)
        if not (isinstance(mul, Binary) and _is(gate, Activation, "sigmoid") and _is(act, Activation, "silu")
                and _is(pool, GlobalAvgPool) and pool.view is not None and c1 is not None and c2 is not None):
            continue
        x = pool.inputs[0]
        if sorted(mul.inputs) != sorted([x, gate.output]) or c1.cin != c2.cout:
            continue
        se = SqueezeExcitation(mul.name, mul.name, c1.cin, c1.cout, dtype, np.random.default_rng(0))
        se.w1, se.b1, se.w2, se.b2 = c1.weight, c1.bias, c2.weight, c2.bias
        replace[id(mul)] = LayerOp(mul.name, [x], mul.output, se)
        dropped.update(id(op) for op in (gate, conv2, act, conv1, pool))
    return [replace.get(id(op), op) for op in ops if id(op) not in dropped]


CHANNELS_LAST, CHANNELS_FIRST = [0, 2, 3, 1], [0, 3, 1, 2]


def fuse_channels_last(ops: list[GraphOp], output: str) -> list[GraphOp]:
    """``Transpose(0, 2, 3, 1)``, a layer norm of the last axis in ONNX's layout, ``Transpose(0, 3, 1, 2)``, each
    tensor between read once: one layer norm of the engine's NHWC channels (the same values, no copies)."""
    readers = _readers(ops)
    replace, dropped = {}, set()
    for first in ops:
        if not isinstance(first, Move) or first.perm != CHANNELS_LAST or len(readers.get(first.output, [])) != 1:
            continue
        norm = readers[first.output][0]
        if not isinstance(norm, LayerNorm) or not norm.onnx_layout or norm.output == output \
                or len(readers.get(norm.output, [])) != 1:
            continue
        last = readers[norm.output][0]
        if not isinstance(last, Move) or last.perm != CHANNELS_FIRST or norm.axis != 3:
            continue
        fused = LayerNorm(norm.name, first.inputs, last.output, norm.layer, False, norm.learned, 3)
        replace[id(first)] = fused
        dropped.update((id(norm), id(last)))
    return [replace.get(id(op), op) for op in ops if id(op) not in dropped]
