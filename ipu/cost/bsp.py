"""Bulk-synchronous supersteps: what one compute set costs the busiest tile.

Poplar runs a program as a sequence of compute sets; before each, the tiles synchronise and
then exchange the data the compute set reads. A compute set therefore costs a sync, an
exchange phase (a fixed part plus the bytes the busiest tile receives at the exchange rate the
planners assume, ``IpuSpec.exchange_bytes_per_cycle``) and the compute of its slowest tile.
``Cycles`` keeps those parts apart (matrix-unit vertices, vector vertices, exchange, sync) so
that the profile can show where a layer's time goes.

The fixed cost of a compute set (``superstep_fixed_cycles``): 90 cycles of sync and 100 fixed cycles of
exchange, the figures poplibs' CTC-loss planner charges for exactly this (``lib/popnn/CTCLossPlan.cpp``:
"We also sync prior to each exchange which has approximately the same cost each time",
``syncCycles = 90``, ``fixedOverheadExchangeCycles``). They are a planner's estimate, not a measurement:
poplibs' reduction planner charges ``Target::getMaxIPUSyncDelay()`` instead, whose value is Poplar's and
not in poplibs, and no readable source gives the on-chip sync and exchange-latency measurements of Jia
et al. (arXiv:1912.03413; ``ipu.cost.evidence.jia2019`` holds what secondary sources state: a 6-cycle memory
latency and a 24 % rise of on-chip latency under full load, which this model, having no load term, does
not reproduce). Both are fields of ``ipu.cost.assumptions.Assumptions`` (``sync_cycles``,
``exchange_fixed_cycles``), which every function here takes; ``poprun-ipu validate --sensitivity`` shows
how much each prediction depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipu.cost.assumptions import Assumptions

EXCHANGE_BYTES_PER_CYCLE = 4  # ipu.specs.EXCHANGE_BYTES_PER_CYCLE (same on every chip)
CATEGORIES = ("matrix", "vector", "exchange", "sync")


@dataclass(frozen=True)
class Cycles:
    """Tile cycles by category, and the compute sets they span."""

    matrix: float = 0.0
    vector: float = 0.0
    exchange: float = 0.0
    sync: float = 0.0
    compute_sets: int = 0

    @property
    def total(self) -> float:
        return self.matrix + self.vector + self.exchange + self.sync

    def __add__(self, other: Cycles) -> Cycles:
        return Cycles(self.matrix + other.matrix, self.vector + other.vector, self.exchange + other.exchange,
                      self.sync + other.sync, self.compute_sets + other.compute_sets)

    def __mul__(self, k: float) -> Cycles:
        return Cycles(self.matrix * k, self.vector * k, self.exchange * k, self.sync * k, int(self.compute_sets * k))

    def as_dict(self) -> dict[str, float]:
        return {c: getattr(self, c) for c in CATEGORIES}


def compute_set(assumptions: Assumptions, matrix: float = 0.0, vector: float = 0.0, exchange_bytes: float = 0.0,
                exchange_cycles: float | None = None) -> Cycles:
    """One superstep: sync, exchange (fixed part + bytes, or the given exchange cycles), compute."""
    if exchange_cycles is None:
        exchange_cycles = -(-exchange_bytes // EXCHANGE_BYTES_PER_CYCLE) if exchange_bytes > 0 else 0.0
    fixed = assumptions.exchange_fixed_cycles if exchange_cycles > 0 else 0.0
    return Cycles(float(matrix), float(vector), float(exchange_cycles + fixed), float(assumptions.sync_cycles), 1)


def compute_sets(assumptions: Assumptions, count: int, matrix: float, vector: float, exchange_cycles: float) -> Cycles:
    """``count`` supersteps with the given totals (a planned convolution's sets): one sync each,
    the fixed exchange part on each set that exchanges (taken as all but the compute-only ones)."""
    fixed = assumptions.exchange_fixed_cycles * count if exchange_cycles > 0 else 0.0
    return Cycles(float(matrix), float(vector), float(exchange_cycles + fixed),
                  float(assumptions.sync_cycles * count), count)


def superstep_fixed_cycles(assumptions: Assumptions) -> float:
    """What a compute set that exchanges costs before any byte moves: its sync and the fixed part of
    its exchange (see the module docstring for the source and its limits)."""
    return float(assumptions.sync_cycles + assumptions.exchange_fixed_cycles)
