"""How much each assumed constant moves each prediction: every one at half and at one and a half times
its value, one at a time, the step time of every preset recomputed.

The constants are those with no measurement behind them (``docs/ipu.md`` marks them "assumed"), the
planner's estimates used for lack of one (the fixed cost of a compute set) and the one calibration
(the outer all-reduce ring). A whole-number constant is rounded, and kept at least 1.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ipu.cost import conv_planner, vectors
from ipu.cost.prediction import predict
from ipu.plan import get_preset, load_profile

FACTORS = (0.5, 1.5)


@dataclass(frozen=True)
class Assumption:
    """A module-level constant of the cost model: ``module.name``."""

    module: str
    name: str
    what: str
    replans: bool = False  # the constant enters the tiles' plans or the cached vector costs

    @property
    def value(self):
        return getattr(importlib.import_module(self.module), self.name)


ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption("ipu.cost.bsp", "SYNC_CYCLES", "sync per compute set (CTC planner's estimate)", True),
    Assumption("ipu.cost.bsp", "EXCHANGE_FIXED_CYCLES", "fixed exchange per compute set (CTC planner's estimate)",
               True),
    Assumption("ipu.cost.vectors", "SCALAR_WORKER_CYCLES", "worker cycles of a scalar compute set", True),
    Assumption("ipu.cost.updates", "TRUST_RATIO_SCALAR_SETS", "compute sets of the LARS trust ratio"),
    Assumption("ipu.cost.updates", "HOST_CALL_S", "host round trip per device-iteration call"),
    Assumption("ipu.cost.host_io", "HOST_NIC_EFFICIENCY", "payload share of the hosts' NICs"),
    Assumption("ipu.cost.host_io", "HOST_LINK_EFFICIENCY", "payload share of the IPU's host link"),
    Assumption("ipu.cost.collectives", "LINK_EFFICIENCY", "IPU-Link efficiency (poplibs_test)"),
    Assumption("ipu.cost.collectives", "ALLREDUCE_RING_LINKS", "IPU-Links per IPU in the all-reduce ring"),
    Assumption("ipu.cost.collectives", "GLOBAL_SYNC_S_PER_HOP", "global sync per hop (poplibs_test)"),
    Assumption("ipu.cost.collectives", "OUTER_RING_BYTES_PER_S", "outer all-reduce ring (calibrated, Mk2 MLPerf)"),
    Assumption("ipu.cost.prediction", "INTER_STAGE_LINKS", "IPU-Links between pipeline stages"),
)


@dataclass(frozen=True)
class Sensitivity:
    """One constant on one preset: the step time at each factor over the step time as it is."""

    assumption: Assumption
    preset: str
    chip: str
    base_s: float
    scaled_s: tuple[float, ...]  # one per FACTORS

    @property
    def changes(self) -> tuple[float, ...]:
        """Relative change of the step time at each factor (+0.1: 10 % longer)."""
        return tuple(s / self.base_s - 1 for s in self.scaled_s)


def scaled(value, factor: float):
    """``value`` times ``factor``; a whole number stays whole and at least 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, round(value * factor))
    return value * factor


@contextmanager
def scaled_constant(assumption: Assumption, factor: float) -> Iterator[None]:
    """``assumption``'s constant times ``factor`` inside the block (the caches it feeds cleared)."""
    module = importlib.import_module(assumption.module)
    original = getattr(module, assumption.name)
    setattr(module, assumption.name, scaled(original, factor))
    _clear(assumption)
    try:
        yield
    finally:
        setattr(module, assumption.name, original)
        _clear(assumption)


def _clear(assumption: Assumption) -> None:
    if assumption.replans:
        conv_planner.plan_conv.cache_clear()
        vectors.elementwise.cache_clear()
        vectors.reduction.cache_clear()


def sensitivity(presets: Sequence[str], chip: str | None = None,
                assumptions: Sequence[Assumption] | None = None) -> list[Sensitivity]:
    """Every assumption (default: ``ASSUMPTIONS``) on every preset (on ``chip``, or the preset's own)."""
    assumptions = ASSUMPTIONS if assumptions is None else assumptions
    plans = {name: replace(get_preset(name), chip=chip) if chip else get_preset(name) for name in presets}
    profiles = {name: load_profile(plan) for name, plan in plans.items()}
    base = {name: predict(plan, profiles[name]).step_time_s for name, plan in plans.items()}
    out = []
    for assumption in assumptions:
        steps: dict[str, list[float]] = {name: [] for name in plans}
        for factor in FACTORS:
            with scaled_constant(assumption, factor):
                for name, plan in plans.items():
                    steps[name].append(predict(plan, profiles[name]).step_time_s)
        out += [Sensitivity(assumption, name, plan.chip, base[name], tuple(steps[name])) for name, plan in plans.items()]
    return out


def format_sensitivity(rows: list[Sensitivity]) -> str:
    """A table: one line per constant, one column per preset, the step time's change at x0.5 / x1.5 (%)."""
    presets = list(dict.fromkeys(r.preset for r in rows))
    lines = ["| constant | value | " + " | ".join(f"`{p}`" for p in presets) + " |",
             "|---|---|" + "---|" * len(presets)]
    for assumption in dict.fromkeys(r.assumption for r in rows):
        cells = {r.preset: r.changes for r in rows if r.assumption == assumption}
        text = [" / ".join(f"{100 * c:+.1f}" for c in cells[p]) for p in presets]
        lines.append(f"| `{assumption.name}`: {assumption.what} | {assumption.value:.4g} | " + " | ".join(text) + " |")
    return "\n".join(lines)
