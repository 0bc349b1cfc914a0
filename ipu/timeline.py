"""Timing a pipeline schedule, and drawing it per IPU as text and as a PNG.

Slots are bulk-synchronous supersteps: all IPUs of a replica sync at the end of each slot, so a
slot lasts as long as the busiest IPU's work in it (plus ``sync_s``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu.schedule import Schedule

StageCosts = Sequence[Mapping[str, float]]  # stage_costs[stage]["FWD" | "RECOMP" | "BWD"] -> s

KIND_COLOURS = {"FWD": "#4C72B0", "RECOMP": "#DD8452", "BWD": "#55A868"}


@dataclass(frozen=True)
class Bar:
    """One operation placed in time on one IPU."""

    ipu: int
    label: str
    kind: str
    start_s: float
    end_s: float


def slot_durations(schedule: Schedule, stage_costs: StageCosts, sync_s: float = 0.0) -> list[float]:
    """Seconds of each slot: the largest per-IPU sum of operation costs in it, plus the sync."""
    if len(stage_costs) != schedule.num_stages:
        raise ValueError(
            f"got costs for {len(stage_costs)} stages but the schedule has {schedule.num_stages}"
        )
    busy = [[0.0] * schedule.num_stages for _ in range(schedule.num_slots)]
    for stage_ops in schedule.ops:
        for op in stage_ops:
            busy[op.slot][op.stage] += stage_costs[op.stage].get(op.kind, 0.0)
    return [max(per_ipu) + sync_s for per_ipu in busy]


def place(schedule: Schedule, stage_costs: StageCosts, sync_s: float = 0.0) -> list[Bar]:
    """Every operation with its start and end time; operations in one slot run back to back."""
    durations = slot_durations(schedule, stage_costs, sync_s)
    starts = [0.0]
    for d in durations[:-1]:
        starts.append(starts[-1] + d)
    bars = []
    for stage_ops in schedule.ops:
        offset: dict[int, float] = {}
        for op in stage_ops:
            t0 = starts[op.slot] + offset.get(op.slot, 0.0)
            cost = stage_costs[op.stage].get(op.kind, 0.0)
            offset[op.slot] = offset.get(op.slot, 0.0) + cost
            bars.append(Bar(op.stage, op.label, op.kind, t0, t0 + cost))
    return bars


def format_timeline(schedule: Schedule, width: int = 7) -> str:
    """A text table: one row per IPU, one column per slot, e.g. ``IPU0 | FWD.1 | FWD.2 ...``."""
    cells = [[""] * schedule.num_slots for _ in range(schedule.num_stages)]
    for stage_ops in schedule.ops:
        for op in stage_ops:
            cell = cells[op.stage][op.slot]
            cells[op.stage][op.slot] = f"{cell} {op.label}".strip()
    col = max([width] + [len(c) for row in cells for c in row])
    head = f"{schedule.kind} schedule, {schedule.num_stages} stages, {schedule.num_micro_batches} micro-batches"
    slots = "slot | " + " | ".join(f"{i:<{col}}" for i in range(schedule.num_slots))
    rows = [f"IPU{s:<2}| " + " | ".join(f"{c:<{col}}" for c in row) for s, row in enumerate(cells)]
    return "\n".join([head, slots, *rows])


def plot_timeline(
    schedule: Schedule, stage_costs: StageCosts, path: str | Path, sync_s: float = 0.0
) -> Path:
    """Write a Gantt chart of the schedule (one lane per IPU) to ``path`` as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = place(schedule, stage_costs, sync_s)
    scale, unit = _time_unit(max(b.end_s for b in bars))
    fig, ax = plt.subplots(figsize=(min(4 + 0.35 * schedule.num_slots, 24), 1 + 0.6 * schedule.num_stages))
    for b in bars:
        width = (b.end_s - b.start_s) * scale
        ax.barh(b.ipu, width, left=b.start_s * scale, color=KIND_COLOURS[b.kind], edgecolor="white")
        if schedule.num_slots <= 12:
            ax.text((b.start_s * scale) + width / 2, b.ipu, b.label, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(schedule.num_stages), [f"IPU{s}" for s in range(schedule.num_stages)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(f"{schedule.kind} pipeline, {schedule.num_micro_batches} micro-batches")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in KIND_COLOURS.values()]
    ax.legend(handles, list(KIND_COLOURS), loc="upper right", fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _time_unit(seconds: float) -> tuple[float, str]:
    if seconds >= 1.0:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"
