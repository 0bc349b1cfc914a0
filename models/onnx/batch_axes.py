"""Where each tensor of an imported graph holds the batch, derived from the graph at the batch it was read at.

The graph model runs at any micro-batch, whatever batch the graph's shapes were inferred (or exported) at: the
engine's layers take the batch from their input. Attention moves the batch off axis 0 (torch's
``MultiheadAttention`` works sequence first, ``[tokens, N, D]``, and folds the heads into it, ``[tokens, N *
heads, d]``) and Swin folds its windows into it (``[N * windows, tokens, D]``), so the graph model follows, for every
tensor, the ONNX axis that holds the batch and how it is folded there: :class:`BatchAxis` (axis, outer, inner), the
axis's size being ``outer * batch * inner`` (row-major: ``outer`` slower, ``inner`` faster than the sample).
``None``: a tensor without the batch (a parameter's broadcast or gather, before it meets the images).

:func:`batch_axes` derives them node by node from the op's semantics (a transpose moves the axis, a gather or
mean before it shifts it, a reshape keeps it where the traced shapes put ``outer * batch * inner`` on one axis),
never by matching a dimension's value alone, so a head count equal to the batch does not confuse it. A reshape's
shape constant that holds the traced batch is rewritten at run time for the actual one (``reshaped``); what cannot
be followed (a reshape that splits the batch over two axes, a softmax or a mean over the batch, a convolution of a
tensor whose batch is not first...) is one reason for the node's blocker. A graph read at batch 1 leaves some
reshapes ambiguous: those are refused, naming the export at a batch of 2 or more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from models.onnx.ir import Graph, Node
from models.onnx.op_table import BATCH_RESHAPES, OPS, REDUCTIONS, SAME_BATCH_LAYERS, SAMPLE_LAYERS, ops_of
from models.onnx.ops_einsum import einsum_terms


@dataclass(frozen=True)
class BatchAxis:
    """The batch on ONNX axis ``axis``, whose size is ``outer * batch * inner``."""

    axis: int
    outer: int = 1
    inner: int = 1

    @property
    def fold(self) -> int:
        return self.outer * self.inner

    def moved(self, axis: int) -> "BatchAxis":
        return BatchAxis(axis, self.outer, self.inner)


FIRST = BatchAxis(0)
UNKNOWN = "unknown"  # a node that could not be followed (its blocker is said once; its readers say nothing)
BINARY = ops_of("binary")


class NotFollowed(ValueError):
    """Why a node's batch cannot be followed."""


def reshaped(x: tuple, y: tuple, b: BatchAxis, batch: int) -> BatchAxis:
    """The batch axis of ``y`` when a tensor of shape ``x`` with its batch at ``b`` is reshaped (row-major) to
    ``y``, both at the traced ``batch``: the one axis k of ``y`` whose leading elements are a whole number of the
    batch's leading block and whose size is ``outer' * batch * inner'``."""
    pre = math.prod(x[:b.axis]) * b.outer
    post = b.inner * math.prod(x[b.axis + 1:])
    found = set()
    for k in range(len(y)):
        cum = math.prod(y[:k])
        if pre % cum or y[k] % ((pre // cum) * batch):
            continue
        outer = pre // cum
        inner = y[k] // (outer * batch)
        if inner * math.prod(y[k + 1:]) == post:
            found.add(BatchAxis(k, outer, inner))
    if len(found) == 1:
        return found.pop()
    if not found:
        raise NotFollowed(f"reshaping {list(x)} to {list(y)} splits the batch (axis {b.axis}, of {batch} samples) "
                          f"over two axes")
    raise NotFollowed(f"reshaping {list(x)} to {list(y)} at a batch of {batch}: where the batch goes is ambiguous; "
                      f"export (or read) the graph at a batch of 2 or more")


def _broadcast(n: Node, ins: list, batch: int) -> BatchAxis:
    """Element-wise ops of several operands (numpy broadcasting): every operand with the batch holds it on the same
    axis of the output, folded alike; the others have size 1 there."""
    rank = len(n.output_shapes[0])
    out = None
    for t, shape, b in zip(n.inputs, n.input_shapes, ins):
        if b is None:
            continue
        b = b.moved(b.axis + rank - len(shape))
        if out is not None and b != out:
            raise NotFollowed(f"its operands hold the batch differently ({out} and {b} of {t!r})")
        out = b
    for t, shape, b in zip(n.inputs, n.input_shapes, ins):
        at = out.axis - (rank - len(shape))
        if b is None and 0 <= at < len(shape) and shape[at] != 1:
            raise NotFollowed(f"operand {t!r} of shape {list(shape)} spans the batch's axis {out.axis} (a constant "
                              f"of the traced batch's size: it would not follow another batch)")
    return out


def _matmul(n: Node, ins: list) -> BatchAxis:
    (ra, rb), rank = (len(s) for s in n.input_shapes[:2]), len(n.output_shapes[0])
    found = []
    for side, (b, r) in enumerate(zip(ins[:2], (ra, rb))):
        if b is None:
            continue
        contracted = r - 1 if side == 0 else r - 2
        if r == 1 or b.axis == contracted:
            raise NotFollowed("the batch is on the axis the product sums over")
        if side == 0 and b.axis == r - 2:
            found.append(b.moved(rank - 2))
        elif side == 1 and b.axis == r - 1:
            found.append(b.moved(rank - 1))
        else:
            found.append(b.moved(b.axis + rank - r))
    if len(found) == 2 and (found[0] != found[1] or found[0].axis >= rank - 2):
        raise NotFollowed(f"both operands hold the batch, on different axes of the product ({found[0]}, {found[1]})")
    return found[0]


def _einsum(n: Node, ins: list) -> BatchAxis:
    """The batch goes with its letter: every operand that holds it holds it on the same letter, folded alike, and
    the output keeps that letter (a sum over the batch mixes the samples)."""
    try:
        terms, out = einsum_terms(n.attrs.get("equation", ""), [len(s) for s in n.input_shapes])
    except ValueError as err:
        raise NotFollowed(str(err)) from None
    held = {(terms[i][b.axis], b.outer, b.inner) for i, b in enumerate(ins) if b is not None}
    if len(held) > 1:
        raise NotFollowed(f"its operands hold the batch on different letters or folds ({sorted(held)})")
    (letter, outer, inner), = held
    if letter not in out:
        raise NotFollowed(f"it sums over the batch's letter {letter!r} (each sample is its own)")
    for t, term, b in zip(n.inputs, terms, ins):
        if b is None and letter in term:
            raise NotFollowed(f"operand {t!r} has the batch's letter {letter!r} without the batch (a constant of the "
                              f"traced batch's size: it would not follow another batch)")
    return BatchAxis(out.index(letter), outer, inner)


def _follow(n: Node, ins: list, batch: int) -> list:
    """The batch axes of ``n``'s outputs from its inputs' (``ins``; ``None``: no batch); raises ``NotFollowed``."""
    if n.op in ("Expand", "Tile"):
        return [_expanded(n, ins[0], batch)]
    if all(b is None for b in ins):
        return [None] * len(n.outputs)
    layer = OPS[n.op].layer if n.op in OPS else ""
    x = n.input_shapes[0]
    b = ins[0]
    a = n.attrs
    if n.op == "Einsum":
        return [_einsum(n, ins)]
    if b is None and n.op not in BINARY | {"MatMul", "Concat"}:
        raise NotFollowed("its data input has no batch while another input has")
    if layer in SAMPLE_LAYERS and n.op != "MatMul":
        if b.axis != 0:
            raise NotFollowed(f"the engine's layer takes the batch on axis 0; here it is on axis {b.axis}")
        return [b] * len(n.outputs)
    if n.op == "Transpose":
        perm = list(a.get("perm", range(len(x) - 1, -1, -1)))
        return [b.moved(perm.index(b.axis))]
    if n.op in BATCH_RESHAPES:
        return [reshaped(x, n.output_shapes[0], b, batch)]
    if n.op in BINARY:
        return [_broadcast(n, ins, batch)]
    if n.op == "MatMul":
        return [_matmul(n, ins)]
    if n.op == "Concat":
        if any(other != b for other in ins[1:]):
            raise NotFollowed("its inputs hold the batch differently")
        if int(a.get("axis", 1)) % len(x) == b.axis:
            raise NotFollowed("it concatenates along the batch's axis")
        return [b]
    if n.op == "DropPath" and b != FIRST:
        raise NotFollowed("stochastic depth draws one factor per sample on axis 0; here the batch is "
                          f"{b}")
    axes = _reduced_axes(n, len(x))
    if b.axis in axes:
        raise NotFollowed(f"it {'mixes' if n.op != 'Gather' else 'indexes'} the batch's axis {b.axis} "
                          f"(each sample is its own)")
    if n.op == "Gather":
        k = len(n.output_shapes[0]) - len(x) + 1  # the indices' rank
        return [b if b.axis < axes[0] else b.moved(b.axis + k - 1)]
    if n.op in REDUCTIONS and not a.get("keepdims", 1):
        return [b.moved(b.axis - sum(1 for ax in axes if ax < b.axis))]
    if layer in SAME_BATCH_LAYERS:
        return [b] * len(n.outputs)
    raise NotFollowed("no rule follows the batch through this op")


def _reduced_axes(n: Node, rank: int) -> tuple:
    """The axes an op mixes or indexes (those that must not hold the batch)."""
    a = n.attrs
    if n.op in ("Gather", "Split"):
        return (int(a.get("axis", 0)) % rank,)
    if n.op in REDUCTIONS:
        return tuple(sorted(int(x) % rank for x in a.get("axes") or range(rank)))
    if n.op == "Softmax":
        axis = int(a.get("axis", -1)) % rank
        return (axis,) if "flatten" not in a else tuple(range(axis, rank))
    if n.op == "LayerNormalization":
        return tuple(range(int(a.get("axis", -1)) % rank, rank))
    return ()


def _expanded(n: Node, b: BatchAxis | None, batch: int) -> BatchAxis:
    """Expand or Tile: a batched input keeps its axis (shifted by the added leading axes), which must not be
    broadcast or repeated; an input without the batch (a parameter: ViT's class token) gets it on the one axis it
    is broadcast (or tiled) to the traced batch from 1."""
    x, y = n.input_shapes[0], n.output_shapes[0]
    lead = len(y) - len(x)
    if b is not None:
        if x[b.axis] != y[b.axis + lead]:
            raise NotFollowed("it broadcasts (or repeats) the batch's axis")
        return b.moved(b.axis + lead)
    padded = (1,) * lead + tuple(x)
    axes = [k for k in range(len(y)) if padded[k] == 1 and y[k] == batch]
    if len(axes) != 1 or batch == 1:
        raise NotFollowed(f"broadcasting {list(x)} to {list(y)} at a batch of {batch}: "
                          f"{'no' if not axes else 'more than one'} axis can be the batch's; export (or read) the "
                          f"graph at a batch of 2 or more, other than the sizes of its axes")
    return BatchAxis(axes[0])


def batch_axes(graph: Graph) -> tuple[dict[str, object], dict[str, str]]:
    """(tensor -> ``BatchAxis``, ``None`` or ``UNKNOWN``; node name -> why its batch cannot be followed)."""
    batch = graph.input_shape[0]
    where: dict[str, object] = {graph.input: FIRST}
    why: dict[str, str] = {}
    for n in graph.nodes:
        ins = [where.get(t) if t else None for t in n.inputs]
        if n.op == "Softmax" and graph.opset < 13:
            n = Node(n.op, n.name, n.inputs, n.outputs, n.input_shapes, n.output_shapes,
                     {**n.attrs, "axis": n.attrs.get("axis", 1), "flatten": True})
        if any(b == UNKNOWN for b in ins):
            outs = [UNKNOWN] * len(n.outputs)
        else:
            try:
                outs = _follow(n, ins, batch)
            except NotFollowed as e:
                why[n.name] = str(e)
                outs = [UNKNOWN] * len(n.outputs)
        where.update(zip(n.outputs, outs))
    return where, why
