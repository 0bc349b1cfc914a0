"""Where the trainable graph model is cut into blocks (the pipeline's split points).

By default a new block starts where the exporter's node-name prefix changes (``/layer1/...`` -> ``layer1``,
``profile._prefix``) and exactly one tensor crosses. ``split_starts`` reads pipeline splits the way
``poprun-ipu predict --onnx --pipeline-splits`` and ``poprun-train``'s ``ipu.pipeline_splits`` give them:
prefix block names, or node names, or torch module paths of any depth (``features.4`` names the first node
under ``/features/features.4/``, ``layer3.0.conv2`` the first under ``/layer3/layer3.0/conv2/``:
``module_path``); then the blocks are ``input`` (from the first node) and one per split, named as the split,
each starting at its node. One rule (``Cuts``) decides for prediction and training alike that a split is a
cut of the graph (one tensor crosses it), else one error names it and the nearest cuts. ``cut`` makes the
blocks of the graph model's ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from models.onnx.ir import Graph, OnnxImportError
from models.onnx.profile import ProfiledGraph, _prefix

if TYPE_CHECKING:
    from models.onnx.ops import GraphOp


def module_path(node_name: str) -> str:
    """The torch module path of an exported node's name: its scopes (all but the last part) joined, where torch
    writes a scope as its module's full path (``/features/features.4/features.4.0/...``) or as the attribute's
    name under its parent (``/layer3/layer3.0/conv2/...``), or as a path from a parent up (``conv2/conv2.0``):
    ``features.4.0``, ``layer3.0.conv2``, ``layer3.0.conv2.0``. Empty for a node outside any module."""
    path: list[str] = []
    for scope in node_name.strip("/").split("/")[:-1]:
        parts = scope.split(".")
        # the longest head of this scope that the path ends with (a full or partial path repeats its parents)
        k = next((k for k in range(min(len(parts) - 1, len(path)), 0, -1) if path[-k:] == parts[:k]), 0)
        path += parts[k:]
    return ".".join(path)


def _under(node_name: str, split: str) -> bool:
    """Whether a node is in the module that ``split`` names: its module path is it or below it, or one of its
    scopes is it."""
    path = module_path(node_name)
    return path == split or path.startswith(split + ".") or split in node_name.strip("/").split("/")[:-1]


class Cuts:
    """Where a graph may be cut for a pipeline: before a node where exactly one tensor crosses (a cut of the
    graph; inside a residual block two do). Nodes whose values the output does not read are left out, as the
    graph model leaves them out. The one rule of both ``poprun-ipu predict --onnx --pipeline-splits`` and
    training's ``ipu.pipeline_splits`` (:func:`split_starts`)."""

    def __init__(self, graph: Graph, prefix_start: dict[str, str] | None = None) -> None:
        self.graph, self.prefix_start = graph, prefix_start or {}
        need, live = set(graph.outputs), []
        for n in reversed(graph.nodes):
            if need.intersection(n.outputs):
                live.append(n)
                need.update(n.inputs)
        self.nodes = live[::-1]
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        self.position = {n.name: i for i, n in enumerate(graph.nodes)}
        last_read = {t: i for i, n in enumerate(self.nodes) for t in n.inputs}
        last_read.update({t: len(self.nodes) for t in graph.outputs})
        alive, self.crossing = {graph.input}, []
        for i, n in enumerate(self.nodes):
            alive = {t for t in alive if last_read.get(t, -1) >= i}
            self.crossing.append(sorted(alive))
            alive |= set(n.outputs)

    def resolve(self, split: str) -> str | None:
        """The node a split names (None: none): a node's name, else the first node under a module path or scope
        (:func:`_under`), else a prefix block's first node; then the first node at or after it that the output
        reads."""
        node = next((n.name for n in self.graph.nodes if n.name == split or _under(n.name, split)),
                    self.prefix_start.get(split))
        if node is None or node not in self.position:
            return None
        at = self.position[node]
        return next((n.name for n in self.nodes if self.position[n.name] >= at), None)

    def is_cut(self, node: str) -> bool:
        return len(self.crossing[self.index[node]]) == 1

    def name(self, node: str) -> str:
        """The shortest split name that starts a block at ``node``: a module path, else the node's name."""
        parts = module_path(node).split(".")
        return next((p for p in (".".join(parts[:k]) for k in range(1, len(parts) + 1)) if p
                     and self.resolve(p) == node), node)

    def nearest(self, node: str) -> str:
        """The valid cuts nearest to ``node`` (before and after it), as split names."""
        i = self.index[node]
        before = next((j for j in range(i - 1, 0, -1) if len(self.crossing[j]) == 1), None)
        after = next((j for j in range(i + 1, len(self.nodes)) if len(self.crossing[j]) == 1), None)
        found = [f"{self.name(self.nodes[j].name)!r} ({where})" for j, where in ((before, "before"), (after, "after"))
                 if j is not None]
        return " and ".join(found) if found else "none: the graph has no cut (one tensor crossing)"


def split_starts(graph: Graph, splits: Sequence[str], shown: str, flag: str) -> tuple[tuple[str, str], ...]:
    """((node, block name), ...) of the blocks the splits start, the first ``(first node, "input")``; empty when
    there are no splits or all name prefix blocks. A split names a prefix block, a node, or a torch module path of
    any depth (the first node under it, :func:`module_path`); each must be a cut of the graph (:class:`Cuts`),
    else one error names it and the nearest cuts. ``shown``: the file as the user named it; ``flag``: the option
    that gave the splits (``--pipeline-splits``, ``ipu.pipeline_splits``), for errors."""
    if not splits:
        return ()
    profiled = ProfiledGraph(graph, "prefix")
    prefix = profiled.blocks()
    prefix_start = {}
    for r in profiled.profile(graph.input_shape[0]):
        prefix_start.setdefault(r.block, r.name)
    cuts = Cuts(graph, prefix_start)
    given = f"{flag} {','.join(splits)}"
    starts = []
    for s in splits:
        live = cuts.resolve(s)
        if live is None:
            raise OnnxImportError(f"{given}: {s!r} names no block, node or module "
                                  f"path of {shown}; name blocks ({', '.join(prefix[:30])}"
                                  f"{' ...' if len(prefix) > 30 else ''}), nodes or module paths, in graph order")
        if cuts.index[live] == 0:
            raise OnnxImportError(f"{given}: {s!r} starts at the first layer of {shown}, where the first stage "
                                  f"starts anyway: name where a later stage starts")
        if not cuts.is_cut(live):
            crossing = cuts.crossing[cuts.index[live]]
            raise OnnxImportError(f"{given}: pipeline split {s!r} (node {live!r}) is not a cut of {shown}: "
                                  f"{len(crossing)} tensors cross it ({', '.join(crossing[:4])}); split where one "
                                  f"tensor crosses (between blocks, not inside a residual block): the nearest "
                                  f"cuts are {cuts.nearest(live)}")
        starts.append(live)
    order = [cuts.index[n] for n in starts]
    if order != sorted(set(order)):
        raise OnnxImportError(f"{given}: give the splits in graph order, once each")
    if all(s in prefix for s in splits):
        return ()
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
