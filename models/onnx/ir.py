"""The graph's IR: what ``graph.load_graph`` makes of an ONNX file and every other module of
``models.onnx`` reads (the profile, the blocks, the trainable network, the fusions).

* :class:`Node`: one op with its tensors' static shapes and its attributes as plain Python;
* :class:`Graph`: the nodes in topological order, the constants as numpy arrays, the trainable weights;
* :class:`OnnxImportError` (a ``ValueError`` said in one line) and :class:`UnsupportedOpError`;
* :class:`Blocker` (one node that cannot import or train, and what would fix it), :func:`blockers_text`
  (every blocker of a graph in one line) and :func:`blocker_lines` (one line per op, reason and fix);
* :func:`param_inputs` and :func:`folded_norm_warning`.

Plain data and numpy, and the op table (``op_table.py``): no ``onnx``, nothing else of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.onnx.op_table import NORM_OPS, WEIGHTED_OPS, ops_of


class OnnxImportError(ValueError):
    """Bad ONNX input, said in one line; ``blockers``: the nodes it names, where it names nodes that cannot import
    or train (``poprun-ipu check`` lists them one a line)."""

    def __init__(self, message: str, blockers: tuple[Blocker, ...] | list[Blocker] = ()) -> None:
        super().__init__(message)
        self.blockers = tuple(blockers)


class UnsupportedOpError(OnnxImportError):
    """A node whose op the importer does not know."""


@dataclass(frozen=True)
class Node:
    """One op of the graph. ``inputs`` are the tensors it reads (data, then weights); constant
    operands that some opsets pass as inputs (Clip's bounds, Squeeze/Unsqueeze/ReduceMean axes,
    Dropout's ratio, Reshape's shape) are in ``attrs`` instead. ``op`` is the ONNX op type, or
    ``SiLU`` for the fused ``Mul(x, Sigmoid(x))``."""

    op: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    output_shapes: tuple[tuple[int, ...], ...]
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    """A network read by ``load_graph``. ``initializers`` holds every constant a node reads (the file's
    initializers and folded values) as numpy arrays; ``params`` names those that are trainable weights
    (see ``param_inputs``), in first-use order."""

    name: str
    input: str
    input_shape: tuple[int, int, int, int]  # N, C, H, W
    outputs: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    nodes: list[Node]
    initializers: dict[str, np.ndarray]
    params: list[str]
    opset: int
    shapes: dict[str, tuple[int, ...]]
    origins: dict[str, str] = field(default_factory=dict)  # a folded reshape of an initializer -> that initializer
    # a folded transpose of an initializer -> that initializer and the permutation
    transposed: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    folded: frozenset[str] = frozenset()  # every value folded from constants (not the file's initializers)

    def learned(self, name: str) -> bool:
        """Whether a constant is (a reshape or transpose of) one of the file's initializers, not a value the
        graph computes from constants (as torch's zero bias of a ``LayerNorm(bias=False)``)."""
        return name not in self.folded or name in self.origins or name in self.transposed


@dataclass(frozen=True)
class Blocker:
    """A node that stops the import (an op not read) or the training (no layer, or an attribute the layer does not
    take): ``why`` says what is missing, ``fix`` what would make it work (an export option), when anything does."""

    op: str
    node: str
    why: str = ""
    fix: str = ""
    inputs: tuple[str, ...] = ()


def blocker_lines(blockers: list[Blocker] | tuple[Blocker, ...]) -> list[str]:
    """One line per op, reason and fix: the count, the first three node names, why and the fix. One node:
    ``Op at node 'n' (inputs [...]): why; fix: ...``."""
    groups: dict[tuple[str, str, str], list[Blocker]] = {}
    for b in blockers:
        groups.setdefault((b.op, b.why, b.fix), []).append(b)
    parts = []
    for (op, why, fix), group in groups.items():
        names = ", ".join(repr(b.node) for b in group[:3]) + (", ..." if len(group) > 3 else "")
        if len(group) == 1:
            at = f"node {names}" + (f" (inputs {list(group[0].inputs)})" if group[0].inputs else "")
        else:
            at = f"{len(group)} nodes ({names})"
        parts.append(f"{op} at {at}" + (f": {why}" if why else "") + (f"; fix: {fix}" if fix else ""))
    return parts


def blockers_text(blockers: list[Blocker]) -> str:
    """Every blocker in one line (:func:`blocker_lines`, numbered when there are several)."""
    parts = blocker_lines(blockers)
    if len(parts) == 1:
        return parts[0]
    return f"{len(parts)} blockers: " + " ".join(f"[{i}] {p};" for i, p in enumerate(parts, 1))[:-1]


def param_inputs(node: Node, constants) -> list[str]:
    """The node's inputs that are trainable weights: Conv/Gemm/MatMul/Einsum weights and biases, norm scales
    and offsets (not batch norm's running statistics), and a non-scalar constant operand of an
    element-wise Add/Sub/Mul/Div (a learned bias or scale); scalar constants are not parameters."""
    if node.op in WEIGHTED_OPS:
        return [t for t in node.inputs[1:3] if t in constants]
    if node.op in ("MatMul", "Einsum") or node.op in ops_of("binary"):
        return [t for t in node.inputs if t in constants and (node.op in ("MatMul", "Einsum") or constants[t].size > 1)]
    return []


EXPORT_FOR_TRAINING = ("torch.onnx.export(model.train(), ..., dynamo=False, training=torch.onnx.TrainingMode.TRAINING, "
                       "do_constant_folding=False)")


def folded_norm_warning(graph: Graph, shown: str, what: str) -> str | None:
    """The one warning for a graph without a normalisation node (prediction and training say the same):
    None when it has one. ``what`` says what the missing norms change (``the prediction leaves out the
    norms' cost``; ``it trains without normalisation``)."""
    if any(n.op in NORM_OPS for n in graph.nodes):
        return None
    return (f"{shown}: the graph has no normalisation layer; if the exporter folded batch norm into the "
            f"convolutions (an eval-mode export, or the dynamo exporter's optimiser), {what}: export with "
            f"{EXPORT_FOR_TRAINING}")
