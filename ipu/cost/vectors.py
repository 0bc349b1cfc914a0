"""Vector work on the tiles: element-wise ops, reductions and their compute sets.

Each op is costed as a popops/popnn vertex on the busiest tile: the tensor is spread over the
tiles (``poputil::calcLinearTileMapping``: at least 128 bytes per tile, grains of a vector),
six workers share a tile's elements, each worker pays a fixed prologue plus cycles per vector
of 4 half or 2 float elements (64-bit data path), and the supervisor adds its own overhead.
The cycles per vector come from poplibs' tables: ``lib/popops/popopsCycleEstimators.hpp``
(unary and binary op tables), ``lib/popops/PerformanceEstimation.cpp`` (scaled add),
``lib/popnn/PerformanceEstimation.hpp`` (non-linearities) and the reduction estimators.

A reduction to few outputs (norm statistics, pooling, the LARS norms) runs as a reduction on
each tile into float partials, then an exchange of those partials and one reduction vertex
per stage of ``vertex_costs.reduce_stage_depths`` (popops' multi-stage reduce).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ipu.cost import vertices as V
from ipu.cost.assumptions import Assumptions
from ipu.cost.bsp import Cycles, compute_set

MIN_BYTES_PER_TILE = 128  # poputil TileMapping.cpp calcLinearTileMapping: minBytesPerTile
SUPERVISOR_OVERHEAD = 11  # popops basicOpSupervisorOverhead
WORKER_PROLOGUE = 21  # scaled add: 15 prologue + 6 inner-loop set-up (PerformanceEstimation.cpp)
# Worker cycles per vector (4 half / 2 float elements) of each op, (half, float):
CYCLES_PER_VECTOR = {
    "binary": (3, 3),  # add/sub/mul: 1 cycle + 2 load/store (binaryOpInnerLoopCycles, external codelet)
    "scaled_add": (3, 3),  # ScaledAdd/aXPlusbY, half/half and float/float inner loop
    "copy": (2, 2),  # assumed: one 64-bit load and store per vector
    "cast": (2, 2),  # estimateCastCycles: one vector in, one out
    "sigmoid": (6, 12),  # unaryOpPerfInfo SIGMOID: 6 cycles per 4 half, 12 per 2 float
    "swish": (5, 11),  # getNonLinearityOpCycles SWISH, vector path
    "swish_grad": (9, 15),  # getNonLinearityGradOpCycles SWISH
    "relu": (1 + 2, 1 + 2),  # RELU: 1 cycle + load/store
    "relu_grad": (3 + 2, 3 + 2),
    "rsqrt": (19, 16),  # RSQRT: 19 per 4 half, 8 per float element
    "sqrt": (23, 20),
    "divide": (21, 20),
    "max": (3, 3),  # max pooling: one compare per vector and tap (assumed like a binary op)
}
# On-tile reduce (getReduceCycleEstimate): accumulators of 8 half / 4 float lanes, a 64-bit load
# per cycle: (8 / 4) + 1 = 3 cycles per 8 half inputs, (4 / 2) + 1 = 3 per 4 float inputs.
REDUCE_CYCLES_PER_ACC = 3


@dataclass(frozen=True)
class VectorOp:
    """``op`` over a tensor of ``elems`` elements (``half``: 2-byte elements)."""

    op: str
    elems: int
    half: bool = True


def tiles_for(elems: int, tiles: int, half: bool) -> int:
    """Tiles a linearly mapped tensor of ``elems`` elements spreads over."""
    per_tile_min = MIN_BYTES_PER_TILE // (2 if half else 4)
    return int(max(1, min(tiles, -(-elems // per_tile_min))))


@functools.lru_cache(maxsize=65536)
def elementwise(op: VectorOp, tiles: int, workers: int, assumptions: Assumptions) -> Cycles:
    """One element-wise compute set: no exchange (operands share the tensor's tile mapping)."""
    if op.elems <= 0:
        return Cycles()
    width = 4 if op.half else 2
    per_tile = -(-op.elems // tiles_for(op.elems, tiles, op.half))
    per_worker = -(-per_tile // workers)
    cycles = CYCLES_PER_VECTOR[op.op][0 if op.half else 1] * -(-per_worker // width)
    return compute_set(assumptions, vector=SUPERVISOR_OVERHEAD + workers * (WORKER_PROLOGUE + cycles))


@functools.lru_cache(maxsize=65536)
def reduction(elems: int, outputs: int, outputs_per_tile: int, tiles: int, workers: int, half: bool,
              assumptions: Assumptions) -> Cycles:
    """Sum ``elems`` inputs into ``outputs`` results; each tile's share touches ``outputs_per_tile``.

    Each tile first reduces its share into float partials (assumed split evenly over the
    workers, ``REDUCE_CYCLES_PER_ACC`` cycles per accumulator-width of inputs); the partials of
    each output, one per tile holding its inputs, are then exchanged and summed in the stages of
    ``vertex_costs.reduce_stage_depths``, each intermediate result on its own tile.
    """
    if elems <= 0:
        return Cycles()
    used = tiles_for(elems, tiles, half)
    per_tile = -(-elems // used)
    acc = 8 if half else 4
    on_tile = compute_set(assumptions, vector=workers * (V.REDUCE_BASE
                                                         + REDUCE_CYCLES_PER_ACC * -(-per_tile // (acc * workers))
                                                         + V.REDUCE_OUTER_OVERHEAD[(True, not half)]))
    touched = max(1, min(outputs_per_tile, outputs))
    depth = max(1, -(-used * touched // max(outputs, 1)))
    total, remaining = on_tile, depth
    for stage in V.reduce_stage_depths(depth):
        remaining = -(-remaining // stage)
        results = outputs * remaining
        per_reducer = -(-results // min(tiles, results))
        total = total + compute_set(
            assumptions, vector=float(V.reduce_cycles(per_reducer, stage, workers, True, True)),
            exchange_bytes=stage * per_reducer * 4)
    return total


def scalar_ops(count: int, workers: int, assumptions: Assumptions) -> Cycles:
    """``count`` compute sets of a few scalar operations on one tile (the trust ratio, a norm's
    inverse standard deviation): a supervisor vertex with one busy worker (``scalar_worker_cycles``)."""
    if count <= 0:
        return Cycles()
    return compute_set(assumptions, vector=SUPERVISOR_OVERHEAD + workers * assumptions.scalar_worker_cycles) * count


def run(ops: list[VectorOp], tiles: int, workers: int, assumptions: Assumptions) -> Cycles:
    total = Cycles()
    for op in ops:
        total = total + elementwise(op, tiles, workers, assumptions)
    return total

