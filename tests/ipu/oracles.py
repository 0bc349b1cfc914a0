"""Reference computations and tolerances the ipu tests check the code against (no code of ``ipu`` uses them).

* :func:`expected_bubble_share`: a pipeline schedule's idle share in closed form, exact fractions,
  which ``ipu.pipeline.timeline.bubble_share`` must equal on the placed timeline;
* :func:`rounding_seed`: the stochastic-rounding seed of one parameter at one weight update, as the
  16.16 emulation's kernel derives it (``jit.hashing.hash3``);
* :func:`is_float16`: every value of a float32 array is float16-representable;
* ``PUBLISHED_FACTOR``: how far the cost model may be from Graphcore's published time to train.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from jit.hashing import hash3
from ipu.pipeline.schedule import SCHEDULES

PUBLISHED_FACTOR = 2.0  # the model must be within this factor of Graphcore's published time to train


def expected_bubble_share(kind: str, num_stages: int, num_micro_batches: int, fwd: int = 1,
                          bwd: int = 1) -> Fraction:
    """The idle share of the IPUs' time in one weight update, from the slot arithmetic in
    ``ipu.pipeline.schedule``'s docstring
    (every stage costs ``fwd`` per forward and ``bwd`` per backward; no recomputation)."""
    s, n, f, b = num_stages, num_micro_batches, Fraction(fwd), Fraction(bwd)
    if kind not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {kind!r}: choose one of {', '.join(SCHEDULES)}")
    if s == 1 or kind == "sequential":
        total = n * s * (f + b)
    elif kind == "grouped":
        total = s * f + (n - 1) * (f + b) + s * b
    else:
        total = s * f + (s + 1) * b + (2 * n - 3) * max(f, b)
    return 1 - n * (f + b) / total


def rounding_seed(seed: int, update: int, param_index: int) -> int:
    """The stochastic-rounding seed of one parameter at one weight update (64 bits, stateless)."""
    return int(hash3(int(seed), int(update), int(param_index)))


def is_float16(x: np.ndarray) -> bool:
    """Every value of float32 ``x`` is float16-representable (inf and nan count as such)."""
    x = np.asarray(x, np.float32)
    return bool(np.array_equal(x, x.astype(np.float16).astype(np.float32), equal_nan=True))
