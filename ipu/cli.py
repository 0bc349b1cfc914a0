"""The text and plain data of ``poprun-ipu`` (``launch.predict``): a plan's memory fit, predicted cost and
comparison with published figures (:func:`describe`, :func:`format_prediction`), the same as JSON
(:func:`prediction_dict`, :data:`JSON_SCHEMA`), the per-layer profile (:func:`show_profile`) and the
validation's figures (:func:`validation_dict`, :func:`sensitivity_dict`)."""

from __future__ import annotations

import json
from pathlib import Path

from ipu.compile import format_memory_report, plot_memory_report
from ipu.cost.prediction import Prediction, predict
from ipu.memory import MemoryPlan, fit, out_of_memory_message
from ipu.pipeline.split import replica_schedule
from ipu.pipeline.timeline import format_timeline, plot_timeline
from ipu.plan import PUBLISHED_CHIP, PUBLISHED_HOURS_TO_TRAIN, IpuPlan, load_profile

JSON_SCHEMA = 1


def show_profile(name: str, prediction: Prediction, chip: str, out: Path, as_json: bool, top: int) -> Path:
    """Print the per-layer profile (a table, or JSON for scripts) and draw ``out/profile_<name>_<chip>.png``."""
    from ipu.cost.breakdown import format_profile, profile_dict
    from ipu.cost.breakdown_plot import plot_profile

    png = plot_profile(name, prediction, out / f"profile_{Path(name).name}_{chip}.png")
    if as_json:
        print(json.dumps({**profile_dict(name, prediction), "png": str(png)}, indent=1))
    else:
        print(format_profile(name, prediction, top=top or None))
        print(f"wrote {png}")
    return png


def validation_dict(parts: list, rows: list) -> dict:
    """``validate --json``: the components (``ipu.cost.validation.components``) and the end-to-end
    comparisons (``comparisons``) as plain data."""
    return {"schema": JSON_SCHEMA, "components": [
        {"component": c.component, "unit": c.unit, "model": c.model, "public": c.public, "ratio": c.ratio,
         "source": c.source, "calibration": c.calibration} for c in parts], "comparisons": [
        {"preset": c.figure.preset, "chip": c.figure.chip, "quantity": c.figure.quantity,
         "predicted": c.predicted, "predicted_without_host_io": c.predicted_without_host_io,
         "published": c.figure.value, "ratio": c.ratio, "source": c.figure.source, "note": c.figure.note}
        for c in rows]}


def op_validation_dict(rows: list, summary: list) -> dict:
    """``validate --ops --json``: every benchmark of poplibs' table beside the model, and the per-kind totals."""
    return {"schema": JSON_SCHEMA, "kinds": [
        {"chip": s.chip, "kind": s.kind, "rows": s.rows, "table_cycles": s.table_cycles, "model_cycles": s.model_cycles,
         "ratio": s.ratio, "low": s.low, "median": s.median, "high": s.high} for s in summary], "rows": [
        {"target": r.benchmark.target, "benchmark": r.benchmark.name, "tool": r.benchmark.tool, "kind": r.kind,
         "table_cycles": r.benchmark.cycles, "model": r.model.as_dict() if r.model else None, "ratio": r.ratio,
         "reason": r.reason} for r in rows]}


def sensitivity_dict(rows: list) -> dict:
    """``validate --sensitivity --json``: each assumption's effect on each preset's step time as plain data
    (``variants``: the factors, or a categorical assumption's other choices)."""
    from ipu.cost.sensitivity import FACTORS

    return {"schema": JSON_SCHEMA, "factors": list(FACTORS), "sensitivity": [
        {"assumption": r.name, "what": r.what, "value": r.value, "variants": list(r.variants), "preset": r.preset,
         "chip": r.chip, "step_time_s": r.base_s, "scaled_step_time_s": list(r.scaled_s),
         "changes": list(r.changes)} for r in rows]}


def prediction_dict(name: str, plan: IpuPlan, epochs: float | None = None, profile: list | None = None) -> dict:
    """One preset's prediction and memory fit as plain data (the ``--json`` interface); ``profile``: the
    layer profile (default: the plan's model, ``load_profile``)."""
    profile = load_profile(plan) if profile is None else profile
    memory = fit(plan, profile)
    p = predict(plan, profile)
    epochs = plan.epochs if epochs is None else epochs
    out = {
        "preset": name, "model": plan.model, "chip": plan.chip, "system": plan.system, "replicas": plan.replicas,
        "ipus_per_replica": plan.ipus_per_replica, "micro_batch": plan.micro_batch,
        "gradient_accumulation": plan.gradient_accumulation, "global_batch": plan.global_batch,
        "precision": plan.precision, "step_time_s": p.step_time_s, "images_per_s": p.images_per_s,
        "epochs": epochs, "time_to_train_h": p.time_to_train_s(epochs) / 3600, "utilisation": p.utilisation(),
        "flops_per_image": p.flops_per_image, "breakdown_s": dict(p.breakdown),
        "host_io_total_s": p.host_io_total_s, "host_copy_s": p.host_copy_s, "io_overlapped": p.io_overlapped,
        "stages": [{"ipu": s.ipu, **{k.lower() + "_s": v for k, v in s.seconds().items()},
                    "cycles_per_micro_batch": s.per_micro_batch.as_dict(),
                    "compute_sets_per_micro_batch": s.per_micro_batch.compute_sets,
                    "optimizer_s": s.optimizer_s} for s in p.stages],
        "memory": {"fits": memory.fits, "peak_tile_bytes": [m.peak_tile_bytes for m in memory.ipus],
                   "memory_per_tile": plan.pod.chip.memory_per_tile},
    }
    published = PUBLISHED_HOURS_TO_TRAIN.get(name) if plan.chip == PUBLISHED_CHIP else None
    if published:
        out["published_hours"] = published
        out["published_over_predicted"] = published / (p.time_to_train_s() / 3600)
    return out


def describe(name: str, plan: IpuPlan, epochs: float | None = None, report_dir: Path | None = None,
             profile: list | None = None) -> str:
    """The full text for one configuration: plan, memory fit, prediction and comparison; ``profile``: the
    layer profile (default: the plan's model, ``load_profile``)."""
    profile = load_profile(plan) if profile is None else profile
    memory = fit(plan, profile)
    prediction = predict(plan, profile)
    title = f"{plan.model} {dict(plan.model_overrides)} at {plan.image_size}px on {plan.system} ({plan.chip})"
    lines = [f"=== {name}: {title}",
             f"{plan.replicas} replicas x {plan.ipus_per_replica} IPUs, micro-batch {plan.micro_batch}, "
             f"GA {plan.gradient_accumulation} -> global batch {plan.global_batch}; {plan.schedule} schedule, "
             f"precision {plan.precision}, recompute {plan.recompute}, AMP {plan.available_memory_proportion}, "
             f"IO tiles {plan.num_io_tiles}, hosts {plan.num_hosts}",
             "-- memory fit (per IPU of one replica)", format_memory_report(memory)]
    lines += _oom_lines(memory, plan)
    lines.append("-- predicted cost on a real POD" + ("" if memory.fits else " (hypothetical: the program does not fit)"))
    lines.append(format_prediction(prediction, epochs))
    published = PUBLISHED_HOURS_TO_TRAIN.get(name) if plan.chip == PUBLISHED_CHIP else None
    if published:
        hours = prediction.time_to_train_s() / 3600
        lines.append(f"published: {published} h to train -> published/predicted = {published / hours:.2f}")
    if report_dir:
        shown = min(plan.gradient_accumulation, 2 * plan.num_stages)  # a readable number of micro-batches
        schedule = replica_schedule(plan.schedule, plan.num_stages, shown, plan.recompute, plan.device_mapping)
        plot_memory_report(memory, report_dir / f"memory_{name}.png")
        plot_timeline(schedule, prediction.stage_costs, report_dir / f"timeline_{name}.png")
        lines.append(format_timeline(schedule))
    return "\n".join(lines)


def _oom_lines(memory: MemoryPlan, plan: IpuPlan) -> list[str]:
    return [out_of_memory_message(ipu, plan) for ipu in memory.ipus if not ipu.fits]


def format_prediction(p: Prediction, epochs: float | None = None) -> str:
    step = p.step_time_s
    parts = ", ".join(f"{k} {v * 1e3:.2f} ms ({100 * v / step:.0f}%)" for k, v in p.breakdown.items())
    epochs = p.plan.epochs if epochs is None else epochs
    stages = "; ".join(f"IPU {s.ipu} {sum(s.seconds().values()) * 1e3:.2f} ms ({s.per_micro_batch.compute_sets} "
                       f"compute sets)" for s in p.stages)
    return (
        f"step (one weight update) {step * 1e3:.2f} ms: {parts}\n"
        f"per micro-batch: {stages}\n"
        f"host input per update: the hosts' NICs {p.host_io_total_s * 1e3:.2f} ms (a bound on the step, not added), "
        f"the copy into the tiles {p.host_copy_s * 1e3:.2f} ms "
        f"({'on the IO tiles, overlapped with compute' if p.io_overlapped else 'added to the step'})\n"
        f"throughput {p.images_per_s:,.0f} images/s for the POD ({p.utilisation():.1%} of peak FLOP/s, "
        f"{p.flops_per_image / 1e9:.1f} GFLOP per image)\n"
        f"time to train {epochs:g} epochs of {p.plan.dataset_images:,} images: {p.time_to_train_s(epochs) / 3600:.2f} h"
    )
