"""``python -m ipu predict``: memory fit and predicted POD cost of a named configuration, no training.

    python -m ipu predict --preset g16-b4-pod64
    python -m ipu predict --all --report-dir out/   # also writes memory and timeline PNGs
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ipu.cost import Prediction, predict
from ipu.memory import fit, out_of_memory_message
from ipu.memory_report import format_memory_report, plot_memory_report
from ipu.pipeline import replica_schedule
from ipu.plan import PRESETS, PUBLISHED_HOURS_TO_TRAIN, IpuPlan, get_preset, load_profile
from ipu.timeline import format_timeline, plot_timeline


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ipu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="print the memory fit and predicted cost of a preset")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--preset", choices=sorted(PRESETS), help="a named configuration")
    which.add_argument("--all", action="store_true", help="every preset")
    p.add_argument("--chip", choices=["mk1", "mk2", "bow"], help="override the preset's IPU")
    p.add_argument("--epochs", type=float, help="epochs for the time to train (default: the preset's)")
    p.add_argument("--report-dir", type=Path, help="write memory_<preset>.png and timeline_<preset>.png here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    names = sorted(PRESETS) if args.all else [args.preset]
    if args.report_dir:
        args.report_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        plan = get_preset(name)
        if args.chip:
            plan = replace(plan, chip=args.chip)
        print(describe(name, plan, args.epochs, args.report_dir))
    return 0


def describe(name: str, plan: IpuPlan, epochs: float | None = None, report_dir: Path | None = None) -> str:
    """The full text for one configuration: plan, memory fit, prediction and comparison."""
    profile = load_profile(plan)
    memory = fit(plan, profile)
    prediction = predict(plan, profile)
    title = f"{plan.model} {dict(plan.model_overrides)} at {plan.image_size}px on {plan.system} ({plan.chip})"
    lines = [f"=== {name}: {title}",
             f"{plan.replicas} replicas x {plan.ipus_per_replica} IPUs, micro-batch {plan.micro_batch}, "
             f"GA {plan.gradient_accumulation} -> global batch {plan.global_batch}; {plan.schedule} schedule, "
             f"precision {plan.precision}, recompute {plan.recompute}, AMP {plan.available_memory_proportion}, "
             f"IO tiles {plan.num_io_tiles}, hosts {plan.num_hosts}",
             "-- memory fit (per IPU of one replica)", format_memory_report(memory)]
    for ipu in memory.ipus:
        if not ipu.fits:
            lines.append(out_of_memory_message(ipu, plan))
    lines.append("-- predicted cost on a real POD" + ("" if memory.fits else " (hypothetical: the program does not fit)"))
    lines.append(format_prediction(prediction, epochs))
    published = PUBLISHED_HOURS_TO_TRAIN.get(name)
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


def format_prediction(p: Prediction, epochs: float | None = None) -> str:
    step = p.step_time_s
    parts = ", ".join(f"{k} {v * 1e3:.2f} ms ({100 * v / step:.0f}%)" for k, v in p.breakdown.items())
    epochs = p.plan.epochs if epochs is None else epochs
    return (
        f"step (one weight update) {step * 1e3:.2f} ms: {parts}\n"
        f"host IO {p.host_io_total_s * 1e3:.2f} ms per update, "
        f"{'overlapped with' if p.io_overlapped else 'added to'} compute\n"
        f"throughput {p.images_per_s:,.0f} images/s for the POD ({p.utilisation():.1%} of peak FLOP/s, "
        f"{p.flops_per_image / 1e9:.1f} GFLOP per image)\n"
        f"time to train {epochs:g} epochs of {p.plan.dataset_images:,} images: {p.time_to_train_s(epochs) / 3600:.2f} h"
    )
