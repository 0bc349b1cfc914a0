"""How much each assumption moves each prediction: every field of ``ipu.cost.assumptions.Assumptions``
varied one at a time, the step time of every preset recomputed.

A number is set to half and one and a half times its value (a whole number is rounded, and kept at
least 1), a hardware width (``POWER_OF_TWO``) to half and twice its value, as widths come in powers of
two (a bus of 3 tiles would share nothing with a split in twos); a field that stands for the chip's own
value or for the calibration (None) is scaled from that value. A categorical field (the statistic the
outer ring is calibrated on) takes each of its other choices instead. Everything else stays as given:
in particular the outer ring is calibrated again under every varied assumption, except when its rate is
the one varied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ipu.cost.assumptions import CHIP_FIELDS, DEFAULT, NAMES, Assumptions, choices, describe
from ipu.cost.collectives import outer_ring_bytes_per_s
from ipu.cost.prediction import predict
from ipu.plan import get_preset, load_profile
from ipu.specs import IpuSpec, get_chip

FACTORS = (0.5, 1.5)
POWER_OF_TWO = ("tiles_per_exchange_bus", "coeff_load_bytes_per_cycle")


@dataclass(frozen=True)
class Sensitivity:
    """One assumption on one preset: the step time with each variant over the step time as it is."""

    name: str  # the field of Assumptions
    preset: str
    chip: str
    value: float | int | str  # the field's value for this preset (the chip's own or the calibration if None)
    variants: tuple[str, ...]  # "x0.5", "x1.5", or the categorical field's other choices
    base_s: float
    scaled_s: tuple[float, ...]  # one per variant

    @property
    def what(self) -> str:
        return describe(self.name)[0]

    @property
    def changes(self) -> tuple[float, ...]:
        """Relative change of the step time with each variant (+0.1: 10 % longer)."""
        return tuple(s / self.base_s - 1 for s in self.scaled_s)


def scaled(value, factor: float):
    """``value`` times ``factor``; a whole number stays whole and at least 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(1, round(value * factor))
    return value * factor


def value_of(name: str, assumptions: Assumptions, spec: IpuSpec):
    """The value the model uses for field ``name`` on chip ``spec``: the field's own, or where it is
    None the chip's (``CHIP_FIELDS``) or the calibrated outer ring's rate."""
    value = getattr(assumptions, name)
    if value is not None:
        return value
    if name in CHIP_FIELDS:
        return getattr(spec, name)
    return outer_ring_bytes_per_s(assumptions)


def variants(name: str, assumptions: Assumptions, spec: IpuSpec) -> tuple[tuple[str, Assumptions], ...]:
    """``assumptions`` with field ``name`` varied, each with its label: a number at every factor of
    ``FACTORS`` (a hardware width halved and doubled), a categorical field at each of its other choices."""
    value = value_of(name, assumptions, spec)
    if choices(name):
        return tuple((c, replace(assumptions, **{name: c})) for c in choices(name) if c != value)
    factors = (0.5, 2.0) if name in POWER_OF_TWO else FACTORS
    return tuple((f"x{f:g}", replace(assumptions, **{name: scaled(value, f)})) for f in factors)


def sensitivity(presets: Sequence[str], chip: str | None = None, names: Sequence[str] | None = None,
                assumptions: Assumptions = DEFAULT) -> list[Sensitivity]:
    """Every field ``names`` (default: all of ``Assumptions``) varied from ``assumptions``, on every preset
    (on ``chip``, or the preset's own)."""
    names = NAMES if names is None else names
    plans = {name: replace(get_preset(name), chip=chip) if chip else get_preset(name) for name in presets}
    profiles = {name: load_profile(plan) for name, plan in plans.items()}
    base = {name: predict(plan, profiles[name], assumptions).step_time_s for name, plan in plans.items()}
    out = []
    for key in names:
        varied = {preset: variants(key, assumptions, get_chip(plan.chip)) for preset, plan in plans.items()}
        steps: dict[str, list[float]] = {preset: [] for preset in plans}
        for i in range(len(next(iter(varied.values())))):  # one variant on every preset, then the next
            for preset, plan in plans.items():
                steps[preset].append(predict(plan, profiles[preset], varied[preset][i][1]).step_time_s)
        out += [Sensitivity(key, preset, plan.chip, value_of(key, assumptions, get_chip(plan.chip)),
                            tuple(label for label, _ in varied[preset]), base[preset], tuple(steps[preset]))
                for preset, plan in plans.items()]
    return out


def format_sensitivity(rows: list[Sensitivity]) -> str:
    """A table: one line per assumption, one column per preset, the step time's change with each variant
    (%: at x0.5 / x1.5, or with the variants the value column names: other factors, a categorical
    assumption's other choices)."""
    presets = list(dict.fromkeys(r.preset for r in rows))
    lines = ["| assumption | value | " + " | ".join(f"`{p}`" for p in presets) + " |",
             "|---|---|" + "---|" * len(presets)]
    for name in dict.fromkeys(r.name for r in rows):
        cells = {r.preset: r for r in rows if r.name == name}
        first = cells[presets[0]]
        value = ", ".join(dict.fromkeys(_number(r.value) for r in cells.values()))
        if first.variants != tuple(f"x{f:g}" for f in FACTORS):
            value += f" ({' / '.join(first.variants)})"
        text = [" / ".join(f"{100 * c:+.1f}" for c in cells[p].changes) for p in presets]
        lines.append(f"| `{name}`: {first.what} | {value} | " + " | ".join(text) + " |")
    return "\n".join(lines)


def _number(value) -> str:
    return value if isinstance(value, str) else f"{value:.4g}"
