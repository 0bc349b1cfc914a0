"""Timing a pipeline schedule, and drawing it per IPU as text and as a PNG.

Slots are bulk-synchronous supersteps: all IPUs of a replica sync at the end of each slot, so a
slot lasts as long as the busiest IPU's work in it (plus ``sync_s``). Stages that share an IPU
(``OpSchedule.device_mapping``) add up on it. Costs are given per stage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu.pipeline.schedule import OpSchedule

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


def slot_durations(schedule: OpSchedule, stage_costs: StageCosts, sync_s: float = 0.0) -> list[float]:
    """Seconds of each slot: the largest per-IPU sum of operation costs in it, plus the sync."""
    if len(stage_costs) != schedule.num_stages:
        raise ValueError(
            f"got costs for {len(stage_costs)} stages but the schedule has {schedule.num_stages}"
        )
    busy = [[0.0] * schedule.num_ipus for _ in range(schedule.num_slots)]
    for stage_ops in schedule.ops:
        for op in stage_ops:
            busy[op.slot][schedule.ipu_of(op.stage)] += stage_costs[op.stage].get(op.kind, 0.0)
    return [max(per_ipu) + sync_s for per_ipu in busy]


def bubble_share(schedule: OpSchedule, stage_costs: StageCosts, sync_s: float = 0.0) -> float:
    """The share of the IPUs' time (IPUs x the update's duration) that no operation uses.

    Computed as idle / total, both exact for integer costs, so it equals the correctly rounded
    ``tests/ipu/oracles.py::expected_bubble_share`` when the arithmetic agrees.
    """
    total = schedule.num_ipus * sum(slot_durations(schedule, stage_costs, sync_s))
    busy = sum(stage_costs[op.stage].get(op.kind, 0.0) for stage_ops in schedule.ops for op in stage_ops)
    return (total - busy) / total


def place(schedule: OpSchedule, stage_costs: StageCosts, sync_s: float = 0.0) -> list[Bar]:
    """Every operation with its start and end time; operations in one slot run back to back."""
    durations = slot_durations(schedule, stage_costs, sync_s)
    starts = [0.0]
    for d in durations[:-1]:
        starts.append(starts[-1] + d)
    bars = []
    offset: dict[tuple[int, int], float] = {}  # (IPU, slot) -> time used so far
    for op in sorted((op for ops in schedule.ops for op in ops), key=lambda op: (op.slot, op.stage)):
        ipu = schedule.ipu_of(op.stage)
        t0 = starts[op.slot] + offset.get((ipu, op.slot), 0.0)
        cost = stage_costs[op.stage].get(op.kind, 0.0)
        offset[(ipu, op.slot)] = offset.get((ipu, op.slot), 0.0) + cost
        bars.append(Bar(ipu, _label(schedule, op), op.kind, t0, t0 + cost))
    return bars


def _label(schedule: OpSchedule, op) -> str:
    """``FWD.3``; ``S2:FWD.3`` (1-based stage) when the op's IPU runs several stages."""
    shared = sum(1 for s in range(schedule.num_stages) if schedule.ipu_of(s) == schedule.ipu_of(op.stage)) > 1
    return f"S{op.stage + 1}:{op.label}" if shared else op.label


def format_sequence(schedule: OpSchedule) -> str:
    """Each IPU's operations in execution order, the notation of Graphcore's talks (IPUs 1-based)::

        IPU1: FWD.1 FWD.2 FWD.3 FWD.4 BWD.1 BWD.2 BWD.3 BWD.4
        IPU2: FWD.1 FWD.2 BWD.1 FWD.3 BWD.2 FWD.4 BWD.3 BWD.4
    """
    lanes: list[list[str]] = [[] for _ in range(schedule.num_ipus)]
    for op in sorted((op for ops in schedule.ops for op in ops), key=lambda op: (op.slot, op.stage)):
        lanes[schedule.ipu_of(op.stage)].append(_label(schedule, op))
    return "\n".join(f"IPU{i + 1}: {' '.join(lane) if lane else '(idle)'}" for i, lane in enumerate(lanes))


def format_timeline(schedule: OpSchedule, width: int = 7) -> str:
    """A text table: one row per IPU, one column per slot, e.g. ``IPU0 | FWD.1 | FWD.2 ...``."""
    cells = [[""] * schedule.num_slots for _ in range(schedule.num_ipus)]
    for op in sorted((op for ops in schedule.ops for op in ops), key=lambda op: (op.slot, op.stage)):
        ipu = schedule.ipu_of(op.stage)
        cells[ipu][op.slot] = f"{cells[ipu][op.slot]} {_label(schedule, op)}".strip()
    col = max([width] + [len(c) for row in cells for c in row])
    head = f"{schedule.kind} schedule, {schedule.num_stages} stages, {schedule.num_micro_batches} micro-batches"
    slots = "slot | " + " | ".join(f"{i:<{col}}" for i in range(schedule.num_slots))
    rows = [f"IPU{s:<2}| " + " | ".join(f"{c:<{col}}" for c in row) for s, row in enumerate(cells)]
    return "\n".join([head, slots, *rows])


def plot_timeline(
    schedule: OpSchedule, stage_costs: StageCosts, path: str | Path, sync_s: float = 0.0
) -> Path:
    """Write a Gantt chart of the schedule (one lane per IPU) to ``path`` as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = place(schedule, stage_costs, sync_s)
    scale, unit = _time_unit(max(b.end_s for b in bars))
    fig, ax = plt.subplots(figsize=(min(4 + 0.35 * schedule.num_slots, 24), 1 + 0.6 * schedule.num_ipus))
    for b in bars:
        width = (b.end_s - b.start_s) * scale
        ax.barh(b.ipu, width, left=b.start_s * scale, color=KIND_COLOURS[b.kind], edgecolor="white")
        if schedule.num_slots <= 12:
            ax.text((b.start_s * scale) + width / 2, b.ipu, b.label, ha="center", va="center", fontsize=6)
    ax.set_yticks(range(schedule.num_ipus), [f"IPU{i}" for i in range(schedule.num_ipus)])
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
