"""``poprun-ipu``: memory fit, predicted POD cost, per-layer profile and validation, no training.

    poprun-ipu predict --preset g16-b4-pod64 [--chip bow] [--json]
    poprun-ipu predict --all --chip mk2 --report-dir out/   # also writes memory and timeline PNGs
    poprun-ipu profile --preset g16-b4-pod256 --chip mk2 --out docs/img   # table + PNG
    poprun-ipu validate                                      # components and ResNet-50 vs public figures
    poprun-ipu validate --sensitivity [--preset NAME ...]    # each assumed constant at x0.5 and x1.5

``predict`` exits with status 1 when a plan does not fit in IPU memory (after printing everything,
the hypothetical prediction included) and names the plans on stderr; 2 is a usage error.
The same as ``python -m ipu``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ipu.compile import format_memory_report, plot_memory_report
from ipu.cost.prediction import Prediction, predict
from ipu.memory import MemoryPlan, fit, out_of_memory_message
from ipu.pipeline.split import replica_schedule
from ipu.pipeline.timeline import format_timeline, plot_timeline
from ipu.plan import PRESETS, PUBLISHED_CHIP, PUBLISHED_HOURS_TO_TRAIN, IpuPlan, get_preset, load_profile
from ipu.specs import CHIPS

JSON_SCHEMA = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poprun-ipu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="print the memory fit and predicted cost of a preset")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--preset", choices=sorted(PRESETS), help="a named configuration")
    which.add_argument("--all", action="store_true", help="every preset")
    p.add_argument("--epochs", type=float, help="epochs for the time to train (default: the preset's)")
    p.add_argument("--report-dir", type=Path, help="write memory_<preset>.png and timeline_<preset>.png here")
    q = sub.add_parser("profile", help="per-layer cycles of a preset by IPU, pass and category (table + PNG)")
    q.add_argument("--preset", choices=sorted(PRESETS), required=True, help="a named configuration")
    q.add_argument("--out", type=Path, default=Path("."), help="directory for profile_<preset>_<chip>.png")
    q.add_argument("--top", type=int, default=25, help="layers per IPU in the table, most expensive first (0: all)")
    v = sub.add_parser("validate", help="compare the model's parts and ResNet-50 predictions with public figures")
    v.add_argument("--sensitivity", action="store_true",
                   help="instead: how each assumed constant at x0.5 and x1.5 moves each preset's step time")
    v.add_argument("--preset", action="append", choices=sorted(PRESETS), dest="presets",
                   help="with --sensitivity: only this preset (repeatable; default: every preset)")
    for s in (p, q, v):
        s.add_argument("--chip", choices=sorted(CHIPS), help="the IPU (default: the preset's; validate: all)")
        s.add_argument("--json", action="store_true", help="print the figures as JSON (a stable interface)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "profile":
        return _profile(args)
    if args.command == "validate":
        return _validate(args)
    names = sorted(PRESETS) if args.all else [args.preset]
    if args.report_dir:
        args.report_dir.mkdir(parents=True, exist_ok=True)
    out, too_big = [], []
    for name in names:
        plan = _with_chip(get_preset(name), args.chip)
        if args.json:
            out.append(prediction_dict(name, plan, args.epochs))
        else:
            print(describe(name, plan, args.epochs, args.report_dir))
        if not fit(plan, load_profile(plan)).fits:
            too_big.append(f"{name} ({plan.chip})")
    if args.json:
        print(json.dumps({"schema": JSON_SCHEMA, "predictions": out}, indent=1))
    if too_big:
        print(f"poprun-ipu: {len(too_big)} of {len(names)} plan(s) do not fit in IPU memory: {', '.join(too_big)} "
              "(the out-of-memory lines above say what to change); exit status 1", file=sys.stderr)
        return 1
    return 0


def _with_chip(plan: IpuPlan, chip: str | None) -> IpuPlan:
    return replace(plan, chip=chip) if chip else plan


def _profile(args) -> int:
    plan = _with_chip(get_preset(args.preset), args.chip)
    show_profile(args.preset, predict(plan, load_profile(plan)), plan.chip, args.out, args.json, args.top)
    return 0


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


def _validate(args) -> int:
    if args.sensitivity:
        return _sensitivity(args)
    if args.presets:
        print("poprun-ipu validate: --preset goes with --sensitivity (validate compares fixed presets); "
              "add --sensitivity or drop --preset", file=sys.stderr)
        return 2
    from ipu.cost.validation import comparisons, components, format_comparisons, format_components

    rows = comparisons(args.chip)
    parts = components()
    if args.json:
        print(json.dumps({"schema": JSON_SCHEMA, "components": [
            {"component": c.component, "unit": c.unit, "model": c.model, "public": c.public, "ratio": c.ratio,
             "source": c.source, "calibration": c.calibration} for c in parts], "comparisons": [
            {"preset": c.figure.preset, "chip": c.figure.chip, "quantity": c.figure.quantity,
             "predicted": c.predicted, "predicted_without_host_io": c.predicted_without_host_io,
             "published": c.figure.value, "ratio": c.ratio, "source": c.figure.source, "note": c.figure.note}
            for c in rows]}, indent=1))
    else:
        print("Components, each against its own public figure:")
        print(format_components(parts))
        print("\nEnd to end (ratio = predicted / published throughput, or published / predicted time):")
        print(format_comparisons(rows))
    return 0


def _sensitivity(args) -> int:
    from ipu.cost.sensitivity import FACTORS, format_sensitivity, sensitivity

    rows = sensitivity(args.presets or sorted(PRESETS), args.chip)
    if args.json:
        print(json.dumps({"schema": JSON_SCHEMA, "factors": list(FACTORS), "sensitivity": [
            {"module": r.assumption.module, "constant": r.assumption.name, "what": r.assumption.what,
             "value": r.assumption.value, "preset": r.preset, "chip": r.chip, "step_time_s": r.base_s,
             "scaled_step_time_s": list(r.scaled_s), "changes": list(r.changes)} for r in rows]}, indent=1))
    else:
        print(f"Step time change (%) with each constant at x{FACTORS[0]:g} / x{FACTORS[1]:g}, one at a time:")
        print(format_sensitivity(rows))
    return 0


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
