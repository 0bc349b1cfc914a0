"""The cost model's assumed numbers, in one frozen object passed to ``predict``.

Every number of the model that no measurement fixes lives here: the planners' estimates used for
lack of a measurement (the fixed cost of a compute set), the modelling choices with no public figure
behind them ("assumed"), the figures of poplibs' test IPU model, and the one calibration (the outer
all-reduce ring, on the Mk2 MLPerf v1.1 logs). Each field's metadata gives what it is
(``what``) and where it comes from (``source``); ``docs/ipu.md`` lists them.

A what-if is ``dataclasses.replace(DEFAULT, sync_cycles=45)``. The object is hashable, so the
model's cached functions take it as an argument. Three fields override a chip fact when set
(``CHIP_FIELDS``; None: the chip's own, ``chip_spec``); ``outer_ring_bytes_per_s`` None is the
calibration under these assumptions with ``outer_ring_statistic``
(``ipu.cost.collectives.outer_ring_bytes_per_s``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace

from ipu.cost.evidence.mlperf_v11 import STATISTICS
from ipu.specs import IpuSpec

CHIP_FIELDS = ("tiles_per_exchange_bus", "coeff_load_bytes_per_cycle", "host_link_bytes_per_s")


def _assumed(default, what: str, source: str, choices: tuple = ()):
    """A field with its description and source (``choices``: the values a categorical one takes)."""
    return field(default=default, metadata={"what": what, "source": source, "choices": choices})


@dataclass(frozen=True)
class Assumptions:
    """The cost model's assumed numbers (see the module docstring)."""

    # --- a compute set (ipu.cost.bsp, ipu.cost.vectors) ---------------------------------------------
    sync_cycles: int = _assumed(
        90, "sync per compute set", "poplibs lib/popnn/CTCLossPlan.cpp syncCycles (a planner's estimate)")
    exchange_fixed_cycles: int = _assumed(
        100, "fixed exchange per compute set",
        "poplibs lib/popnn/CTCLossPlan.cpp fixedOverheadExchangeCycles (a planner's estimate)")
    scalar_worker_cycles: int = _assumed(
        30, "worker cycles of a scalar compute set (a trust ratio, a norm's 1/std)", "assumed")
    memcpy_bytes_per_cycle: int = _assumed(
        8, "on-tile copy of a layout change, bytes per cycle", "assumed: one 64-bit load/store pair per cycle")
    # --- layers and updates (ipu.cost.layers, ipu.cost.updates) -------------------------------------
    loss_fwd_sets: int = _assumed(4, "compute sets of the softmax loss, forward", "assumed: max, exp, sum, divide")
    loss_bwd_sets: int = _assumed(2, "compute sets of the softmax loss, backward", "assumed: subtract, scale")
    maxpool_taps: int = _assumed(
        9, "compares per output of a max pooling", "assumed: a 3x3 window (ResNet's stem pool)")
    trust_ratio_scalar_sets: int = _assumed(
        3, "compute sets of the LARS trust ratio", "assumed: sqrt of two sums, the ratio and its guard")
    host_call_s: float = _assumed(
        50e-6, "host round trip per device-iteration call (s)", "assumed: one engine run call over PCIe/RoCE")
    # --- host IO (ipu.cost.host_io) -------------------------------------------------------------------
    host_nic_efficiency: float = _assumed(0.7, "payload share of the hosts' NICs", "assumed")
    host_link_efficiency: float = _assumed(0.7, "payload share of the IPU's host link", "assumed")
    # --- between IPUs (ipu.cost.collectives, ipu.cost.prediction) -------------------------------------
    link_efficiency: float = _assumed(
        0.85, "IPU-Link efficiency", "poplibs lib/poplibs_test/Util.cpp addGlobalExchangeConstraints linkEfficiency")
    global_sync_s_per_hop: float = _assumed(
        15e-9, "global sync per hop (s)", "poplibs lib/poplibs_test/Util.cpp setGlobalSyncLatency syncLatencyPerHop")
    allreduce_ring_links: int = _assumed(2, "IPU-Links per IPU in the all-reduce ring", "assumed")
    inter_stage_links: int = _assumed(2, "IPU-Links between pipeline stages", "assumed")
    outer_ring_statistic: str = _assumed(
        "lower_quartile", "statistic of the logged epochs the outer ring is calibrated on",
        "ipu.cost.evidence.mlperf_v11 (the lower quartile lies among the short, training-only epochs)",
        STATISTICS)
    outer_ring_bytes_per_s: float | None = _assumed(
        None, "outer all-reduce ring between IPU-Link domains (B/s)",
        "calibrated on the Mk2 MLPerf v1.1 logs (POD256 - POD128 step); None: the calibration")
    # --- chip facts with no public figure (ipu.specs; None: the chip's own) ---------------------------
    tiles_per_exchange_bus: int | None = _assumed(
        None, "tiles sharing an exchange bus", "poplibs ExchangeEstimator.hpp 'super tile'; the count 2 is assumed")
    coeff_load_bytes_per_cycle: int | None = _assumed(
        None, "coefficient load path into the conv units (B/cycle)",
        "assumed: a 128-bit load, halved by poplibs unless use128BitConvUnitLoad")
    host_link_bytes_per_s: float | None = _assumed(
        None, "host link per IPU (B/s)", "PCIe Gen4, 64 GB/s per IPU (docs/sources.md §4); Mk1 assumed")

    def __post_init__(self):
        if self.outer_ring_statistic not in STATISTICS:
            raise ValueError(f"outer_ring_statistic {self.outer_ring_statistic!r} is not one of "
                             f"{', '.join(STATISTICS)}: choose one of them")
        for f in fields(self):
            value = getattr(self, f.name)
            if not f.metadata["choices"] and value is not None and not value > 0:
                raise ValueError(f"{f.name} = {value!r}: {f.metadata['what']} must be positive")

    def chip_spec(self, spec: IpuSpec) -> IpuSpec:
        """``spec`` with the chip facts these assumptions set (``CHIP_FIELDS`` not None)."""
        return _chip_spec(self, spec)


@functools.lru_cache(maxsize=64)
def _chip_spec(assumptions: Assumptions, spec: IpuSpec) -> IpuSpec:
    overrides = {name: getattr(assumptions, name) for name in CHIP_FIELDS if getattr(assumptions, name) is not None}
    return replace(spec, **overrides) if overrides else spec


NAMES = tuple(f.name for f in fields(Assumptions))


def describe(name: str) -> tuple[str, str]:
    """What the field ``name`` of ``Assumptions`` is and its source."""
    metadata = _metadata(name)
    return metadata["what"], metadata["source"]


def choices(name: str) -> tuple:
    """The values a categorical field takes (empty for a number)."""
    return _metadata(name)["choices"]


def _metadata(name: str):
    for f in fields(Assumptions):
        if f.name == name:
            return f.metadata
    raise ValueError(f"Assumptions has no field {name!r}: choose one of {', '.join(NAMES)}")


DEFAULT = Assumptions()
