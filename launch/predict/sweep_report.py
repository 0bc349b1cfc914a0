"""A sweep's rows: the memory fit and the predicted cost of each combination, as a table, JSON and a picture.

The layer profile comes from ``profile_for(plan)`` (``ipu.plan.load_profile`` for a configuration's own
model); any other source of ``LayerProfile`` records (an imported graph) plugs in there. Rows are sorted
fastest first (most images per second) among those that fit, then those that do not fit (marked), then
the combinations that cannot run at all (with the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu.cost.prediction import predict
from ipu.memory import fit, format_bytes
from ipu.pipeline.split import split_stages
from ipu.plan import IpuPlan
from launch.predict.sweep import describe_choice, plan_for
from models.profile import LayerProfile
from poprun_py.systems import get_system

SWEEP_SCHEMA = 1  # bump when a field of the --json document changes meaning or goes away
ProfileSource = Callable[[IpuPlan], Sequence[LayerProfile]]


@dataclass(frozen=True)
class Row:
    choice: dict[str, object]  # the swept options' values, by IpuPlan field
    plan: IpuPlan | None  # None: the combination cannot run (``error`` says why)
    error: str = ""
    fits: bool = False
    splits: tuple[str, ...] = ()
    auto_split: bool = False
    peak_tile_bytes: int = 0
    step_time_s: float = 0.0
    images_per_s: float = 0.0
    time_to_train_h: float = 0.0
    utilisation: float = 0.0

    @property
    def status(self) -> str:
        return "invalid" if self.plan is None else ("fits" if self.fits else "does not fit")


def evaluate(base: IpuPlan, choice: Mapping[str, object], profile_for: ProfileSource, epochs: float | None = None,
             momentum: float = 0.0, splits: Sequence[str] = ()) -> Row:
    """One combination's row (an invalid one keeps its reason instead of raising)."""
    try:
        plan = plan_for(base, choice, momentum, splits)
    except ValueError as err:
        return Row(dict(choice), None, str(err))
    profile = profile_for(plan)
    memory = fit(plan, profile)
    p = predict(plan, profile)
    split = split_stages(profile, plan.num_stages, plan.pipeline_splits)
    return Row(dict(choice), plan, fits=memory.fits, splits=split.splits,
               auto_split=plan.num_stages > 1 and not plan.pipeline_splits,
               peak_tile_bytes=max(m.peak_tile_bytes for m in memory.ipus), step_time_s=p.step_time_s,
               images_per_s=p.images_per_s, time_to_train_h=p.time_to_train_s(epochs) / 3600,
               utilisation=p.utilisation())


def sort_rows(rows: Sequence[Row]) -> list[Row]:
    """Fitting rows fastest first, then those that do not fit (fastest first), then invalid ones as given."""
    rank = {"fits": 0, "does not fit": 1, "invalid": 2}
    return sorted(rows, key=lambda r: (rank[r.status], -r.images_per_s if r.plan else 0.0))


def sweep(base: IpuPlan, choices: Sequence[Mapping[str, object]], profile_for: ProfileSource,
          epochs: float | None = None, momentum: float = 0.0, splits: Sequence[str] = ()) -> list[Row]:
    return sort_rows([evaluate(base, c, profile_for, epochs, momentum, splits) for c in choices])


HEADER = ("#", "system", "IPUs/rep", "replicas", "micro", "GA", "batch", "precision", "splits", "fits",
          "peak tile", "step ms", "images/s", "train h", "util", "also")
SHOWN = ("system", "ipus_per_replica", "micro_batch", "global_batch", "precision")  # the other options go to "also"


def _cells(i: int, r: Row) -> tuple[str, ...]:
    p = r.plan
    assert p is not None
    splits = ",".join(r.splits) or "-"
    return (str(i), p.system, str(p.ipus_per_replica), str(p.replicas), str(p.micro_batch),
            str(p.gradient_accumulation), str(p.global_batch), p.precision, splits + (" (auto)" if r.auto_split else ""),
            "yes" if r.fits else "NO", f"{format_bytes(r.peak_tile_bytes)}/{format_bytes(p.pod.chip.memory_per_tile)}",
            f"{r.step_time_s * 1e3:.1f}", f"{r.images_per_s:,.0f}", f"{r.time_to_train_h:.2f}", f"{r.utilisation:.1%}",
            describe_choice({k: v for k, v in r.choice.items() if k not in SHOWN}))


def format_table(rows: Sequence[Row], title: str) -> str:
    """The rows as an aligned text table; invalid combinations follow with their reasons."""
    valid = [r for r in rows if r.plan is not None]
    body = [HEADER] + [_cells(i, r) for i, r in enumerate(valid, 1)]
    widths = [max(len(line[k]) for line in body) for k in range(len(HEADER))]
    lines = [title] + ["  ".join(c.rjust(w) if k not in (1, 7, 8, 15) else c.ljust(w)
                                 for k, (c, w) in enumerate(zip(line, widths))).rstrip() for line in body]
    misfits = sum(1 for r in valid if not r.fits)
    lines.append(f"{len(valid) - misfits} of {len(rows)} combinations fit, fastest first; {misfits} do not fit "
                 "(fits NO: the out-of-memory figures are hypothetical); peak tile: the fullest tile's bytes / a "
                 "tile's memory; (auto): pipeline split balanced by FLOPs; also: the other options swept")
    for r in rows:
        if r.plan is None:
            lines.append(f"cannot run: {r.error}")
    return "\n".join(lines)


def row_dict(r: Row) -> dict:
    """One row of the ``--json`` document (docs/ipu.md, "What-if sweeps")."""
    out: dict = {"choice": {k: v for k, v in r.choice.items()}, "status": r.status}
    if r.plan is None:
        return {**out, "error": r.error}
    p = r.plan
    return {**out, "fits": r.fits, "model": p.model, "system": p.system, "chip": p.chip,
            "ipus_per_replica": p.ipus_per_replica, "replicas": p.replicas, "micro_batch": p.micro_batch,
            "gradient_accumulation": p.gradient_accumulation, "global_batch": p.global_batch,
            "precision": p.precision, "image_size": p.image_size, "recompute": p.recompute,
            "num_io_tiles": p.num_io_tiles, "available_memory_proportion": p.available_memory_proportion,
            "optimizer": p.optimizer, "num_hosts": p.num_hosts, "pipeline_splits": list(r.splits),
            "auto_split": r.auto_split, "peak_tile_bytes": r.peak_tile_bytes,
            "memory_per_tile": p.pod.chip.memory_per_tile, "step_time_s": r.step_time_s,
            "images_per_s": r.images_per_s, "time_to_train_h": r.time_to_train_h, "utilisation": r.utilisation}


def sweep_dict(name: str, rows: Sequence[Row], epochs: float, options: Mapping[str, Sequence]) -> dict:
    fitting = sum(1 for r in rows if r.fits)
    return {"schema": SWEEP_SCHEMA, "kind": "sweep", "config": name, "epochs": epochs,
            "options": {k: list(v) for k, v in options.items()}, "fitting": fitting,
            "rows": [row_dict(r) for r in rows]}


def plot_sweep(rows: Sequence[Row], path: Path, title: str) -> Path:
    """Images per second against POD size (both log scales), one line per choice of the other options;
    filled markers fit, crosses do not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, list[Row]] = {}
    for r in rows:
        if r.plan is not None:
            rest = {k: v for k, v in r.choice.items() if k != "system"}
            lines.setdefault(describe_choice(rest) or "the configuration", []).append(r)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, members in lines.items():
        members.sort(key=lambda r: get_system(r.plan.system).num_ipus)  # type: ignore[union-attr]
        xs = [get_system(r.plan.system).num_ipus for r in members]  # type: ignore[union-attr]
        ys = [r.images_per_s for r in members]
        (line,) = ax.plot(xs, ys, "-", alpha=0.6, label=label)
        for x, y, r in zip(xs, ys, members):
            ax.plot(x, y, "o" if r.fits else "x", color=line.get_color(), markersize=7 if r.fits else 9)
    systems = sorted({r.plan.system for r in rows if r.plan is not None}, key=lambda s: get_system(s).num_ipus)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([get_system(s).num_ipus for s in systems], systems)
    ax.set_xlabel("IPU-POD (IPUs, log scale)")
    ax.set_ylabel("predicted images per second")
    ax.set_title(f"{title}\n(o fits in IPU memory, x does not)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
