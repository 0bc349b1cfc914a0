"""ONNX's ``Einsum`` as a graph op: numpy's ``einsum`` forward, and one ``einsum`` per operand backward.

The equation is made explicit once, when the graph is read (:func:`einsum_terms`): every axis of every operand
and of the output gets its own letter (``...`` becomes letters no term uses, right-aligned as broadcasting aligns
them; an implicit output is the letters used once, alphabetically, after the ellipsis). The gradient of operand
``i`` is then ``einsum(output, other operands -> operand i)``; a letter of operand ``i`` that neither the output
nor another operand has (summed within that operand alone) gets the gradient broadcast along it. Not taken: a
letter twice in one operand (a diagonal or a trace) and a size-1 axis broadcast against a longer one; both are
refused when the graph is read. torchvision's MaxViT writes its attention as two Einsums
(``bghid,bghjd->bghij`` and its partner).
"""

from __future__ import annotations

import math
import string
from collections import Counter

import numpy as np

from models.onnx.ops import GraphOp, from_onnx, to_onnx
from models.param import Param


def einsum_terms(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' and the output's subscripts, one letter per axis; ValueError naming what is not taken."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    free = [c for c in string.ascii_letters if c not in eq]
    spans = [rank - len(t.replace("...", "")) for t, rank in zip(terms, ranks) if "..." in t]
    ellipsis = "".join(free[:max(spans, default=0)])
    explicit = []
    for t, rank in zip(terms, ranks):
        if "..." in t:
            t = t.replace("...", ellipsis[len(ellipsis) - (rank - len(t.replace("...", ""))):])
        if len(t) != rank or not t.isalpha():
            raise ValueError(f"term {t!r} of equation {equation!r} does not name each of its operand's {rank} axes")
        if len(set(t)) != len(t):
            raise ValueError(f"term {t!r} of equation {equation!r} repeats a letter (a diagonal or a trace)")
        explicit.append(t)
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        counts = Counter("".join(explicit))
        out = ellipsis + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ellipsis))
    if len(set(out)) != len(out) or not set(out) <= set("".join(explicit)):
        raise ValueError(f"output {out!r} of equation {equation!r}: each letter once, each from an operand")
    return explicit, out


def letter_sizes(terms: list[str], shapes: list[tuple]) -> dict[str, int]:
    """Each letter's size; ValueError where two operands disagree (a size-1 axis broadcast is not taken)."""
    sizes: dict[str, int] = {}
    for t, shape in zip(terms, shapes):
        for c, n in zip(t, shape):
            if sizes.setdefault(c, n) != n:
                raise ValueError(f"axis {c!r} is {sizes[c]} in one operand and {n} in another (broadcasting a "
                                 f"size-1 axis is not taken: expand it before the Einsum)")
    return sizes


def einsum_macs(terms: list[str], out: str, shapes: list[tuple]) -> int:
    """Multiply-adds of the contraction: one per combination of all its letters' values."""
    return math.prod(letter_sizes(terms, shapes).values())


class Einsum(GraphOp):
    """numpy's ``einsum`` of its operands, each a computed tensor (by name), a trainable ``Param`` (a constant
    weight, kept in ONNX's layout) or a fixed array, in ONNX's layout (an image-shaped operand is transposed to
    it and the result back). Keeps every operand (in ONNX's layout)."""

    def __init__(self, name, operands: list, output: str, terms: list[str], out: str) -> None:
        super().__init__(name, [o for o in operands if isinstance(o, str)], output)
        self.operands, self.terms, self.out = operands, terms, out

    def params(self) -> list[Param]:
        return [o for o in self.operands if isinstance(o, Param)]

    def forward(self, xs, training):
        it = iter(xs)
        self.values = [to_onnx(next(it)) if isinstance(o, str) else o.data if isinstance(o, Param) else o
                       for o in self.operands]
        return from_onnx(np.einsum(f"{','.join(self.terms)}->{self.out}", *self.values, optimize=True))

    def backward(self, dy):
        g = to_onnx(dy)
        out = []
        for i, (o, term) in enumerate(zip(self.operands, self.terms)):
            if not isinstance(o, (str, Param)):
                continue  # a fixed array: no gradient
            others = [(t, v) for j, (t, v) in enumerate(zip(self.terms, self.values)) if j != i]
            seen = set(self.out).union(*(t for t, _ in others))
            kept = "".join(c for c in term if c in seen)
            grad = np.einsum(f"{','.join([self.out] + [t for t, _ in others])}->{kept}", g,
                             *(v for _, v in others), optimize=True)
            if kept != term:  # letters summed within this operand alone: the gradient is the same along them
                grad = np.broadcast_to(grad.reshape([grad.shape[kept.index(c)] if c in kept else 1 for c in term]),
                                       self.values[i].shape)
            if isinstance(o, Param):
                o.grad[...] = grad
            elif isinstance(o, str):
                out.append(from_onnx(np.ascontiguousarray(grad)))
        return out
