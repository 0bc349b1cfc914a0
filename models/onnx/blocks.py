"""Where the trainable graph model is cut into blocks (the pipeline's split points).

By default a new block starts where the exporter's node-name prefix changes (``/layer1/...`` -> ``layer1``,
``profile._prefix``) and exactly one tensor crosses. ``split_starts`` reads pipeline splits the way
``poprun-ipu predict --onnx --pipeline-splits`` and ``poprun-train``'s ``ipu.pipeline_splits`` give them:
prefix block names, or node names, or module paths of torch's node names (``features.4`` names the first
node under ``/features/features.4/``); then the blocks are ``input`` (from the first node) and one per split,
named as the split, each starting at its node. ``cut`` makes the blocks of the graph model's ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from models.onnx.ir import Graph, OnnxImportError
from models.onnx.profile import ProfiledGraph, _prefix

if TYPE_CHECKING:
    from models.onnx.ops import GraphOp


def split_starts(graph: Graph, splits: Sequence[str], shown: str, flag: str) -> tuple[tuple[str, str], ...]:
    """((node, block name), ...) of the blocks the splits start, the first ``(first node, "input")``; empty when
    there are no splits or all name prefix blocks. ``shown``: the file as the user named it; ``flag``: the option
    that gave the splits (``--pipeline-splits``, ``ipu.pipeline_splits``), for errors."""
    if not splits:
        return ()
    prefix = ProfiledGraph(graph, "prefix").blocks()
    if all(s in prefix for s in splits):
        return ()
    starts = []
    for s in splits:
        node = next((n.name for n in graph.nodes if n.name == s or s in n.name.strip("/").split("/")), None)
        if node is None:
            raise OnnxImportError(f"{flag} {','.join(splits)}: {s!r} names no block, node or module "
                                  f"path of {shown}; name blocks ({', '.join(prefix[:30])}"
                                  f"{' ...' if len(prefix) > 30 else ''}), nodes or module paths, in graph order")
        starts.append(node)
    order = [n.name for n in graph.nodes]
    if [order.index(n) for n in starts] != sorted({order.index(n) for n in starts}):
        raise OnnxImportError(f"{flag} {','.join(splits)}: give the splits in graph order, once each")
    first = graph.nodes[0].name
    return tuple(dict.fromkeys([(first, "input"), *zip(starts, splits)]))


def cut(ops: list[GraphOp], graph: Graph, starts: tuple[tuple[str, str], ...] = ()):
    """(name, ops, input tensor, output tensor) of each block. Without ``starts``: by name prefix, a name that
    comes back later gets ``#2``, ``#3``... With ``starts`` (``split_starts``): a block from each start's node
    (the first op at or after it: the importer merges some nodes into one op), which must be a point where one
    tensor crosses (a cut of the graph), else an ``OnnxImportError`` naming the split."""
    input, output = graph.input, graph.outputs[0]
    last_read = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            last_read[t] = i
    last_read[output] = len(ops)
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    at = {}
    for node, name in starts[1:]:
        i = next((k for k, op in enumerate(ops) if position.get(op.name, -1) >= position[node]), None)
        if i is None or i == 0 or i in at:
            raise OnnxImportError(f"{graph.name}: pipeline split {name!r} (node {node!r}) starts no block of its own")
        at[i] = name
    alive, parts, start, crossing = {input}, [], 0, input
    for i, op in enumerate(ops):
        alive = {t for t in alive if last_read.get(t, -1) >= i}
        if starts and i in at and len(alive) != 1:
            raise OnnxImportError(f"{graph.name}: pipeline split {at[i]!r} is not a cut of the graph: "
                                  f"{len(alive)} tensors cross it ({', '.join(sorted(alive)[:4])}); split where "
                                  f"one tensor crosses (between blocks, not inside a residual block)")
        new = i in at if starts else i > start and len(alive) == 1 and _prefix(op.name) != _prefix(ops[i - 1].name)
        if new:
            parts.append((start, i, crossing))
            start, crossing = i, next(iter(alive))
        alive.add(op.output)
    parts.append((start, len(ops), crossing))
    out, seen = [], {}
    for k, (a, b, inp) in enumerate(parts):
        if starts:
            name = starts[0][1] if a == 0 else at[a]
        else:
            label = _prefix(ops[a].name)
            seen[label] = seen.get(label, 0) + 1
            name = label if seen[label] == 1 else f"{label}#{seen[label]}"
        out.append((name, ops[a:b], inp, parts[k + 1][2] if k + 1 < len(parts) else output))
    return out
