"""The work of ``poprun-ipu``'s commands, once ``launch.predict.cli`` has read the command line: each
function prints its figures and returns the exit status (0; 1 when a plan does not fit in IPU memory)
and raises ``ValueError`` (a :class:`~launch.predict.sweep.UsageError` names the flag) for a bad value;
``check_onnx`` returns 2 when the file has a blocker."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ipu import cli as ipu_text
from ipu.memory import fit
from ipu.plan import IpuPlan, get_preset, load_profile
from launch.predict.base import Base
from launch.predict.sweep import PLAN_OPTIONS, UsageError, batch_rule, combinations, is_sweep, plan_for
from launch.predict.sweep_report import ProfileSource, format_table, plot_sweep, sweep, sweep_dict

EXIT_DOES_NOT_FIT = 1
EXIT_BLOCKED = 2  # check: the file cannot predict or train (as bad input is for the other commands)


def predict_presets(names: Sequence[str], chip: str | None, epochs: float | None, as_json: bool,
                    report_dir: Path | None) -> int:
    """``predict --preset NAME`` or ``--all``: each preset's plan as it is (on ``chip`` when given)."""
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    out, too_big = [], []
    for name in names:
        plan = with_chip(get_preset(name), chip)
        profile = load_profile(plan)
        if as_json:
            out.append(ipu_text.prediction_dict(name, plan, epochs, profile))
        else:
            print(ipu_text.describe(name, plan, epochs, report_dir, profile))
        if not fit(plan, profile).fits:
            too_big.append(f"{name} ({plan.chip})")
    if as_json:
        print(json.dumps({"schema": ipu_text.JSON_SCHEMA, "predictions": out}, indent=1))
    if too_big:
        print(f"poprun-ipu: {len(too_big)} of {len(names)} plan(s) do not fit in IPU memory: {', '.join(too_big)} "
              "(the out-of-memory lines above say what to change); exit status 1", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def profile_preset(name: str, chip: str | None, out: Path, as_json: bool, top: int) -> int:
    """``profile --preset NAME``: the per-layer profile of a preset's plan."""
    from ipu.cost.prediction import predict

    plan = with_chip(get_preset(name), chip)
    ipu_text.show_profile(name, predict(plan, load_profile(plan)), plan.chip, out, as_json, top)
    return 0


def with_chip(plan: IpuPlan, chip: str | None) -> IpuPlan:
    return replace(plan, chip=chip) if chip else plan


def predict_plans(base: Base, grid: dict[str, tuple], epochs: float | None, as_json: bool, report_dir: Path | None,
                  plot: Path | None, profile_for: ProfileSource = load_profile, splits: tuple[str, ...] = ()) -> int:
    """``predict --config|--preset|--onnx`` with plan options: one plan, or a sweep's table."""
    epochs = base.plan.epochs if epochs is None else epochs
    choices = combinations(grid)
    if not is_sweep(grid):
        plan = one_plan(base, choices[0], splits)
        return predict_one(base.name, plan, profile_for(plan), epochs, as_json, report_dir)
    if report_dir:
        raise UsageError("--report-dir writes one plan's pictures: with a sweep, use --plot PNG")
    if splits and not any(c.get("ipus_per_replica", base.plan.ipus_per_replica) == len(splits) + 1 for c in choices):
        raise UsageError(f"--pipeline-splits {','.join(splits)} makes {len(splits) + 1} stages but no "
                         f"combination has {len(splits) + 1} IPUs per replica")
    rows = sweep(base.plan, choices, profile_for, epochs, base.momentum, splits)
    if all(r.plan is None for r in rows):
        raise UsageError(f"no combination can run; the first: {rows[0].error}")
    title = f"{base.name}: {base.plan.model} at {base.plan.image_size}px, {epochs:g} epochs"
    rule = batch_rule(grid, base.plan)
    if as_json:
        print(json.dumps({**sweep_dict(base.name, rows, epochs, grid), "batch_rule": rule}, indent=1))
    else:
        print(format_table(rows, f"{title}; {rule}"))
    if plot:
        png = plot_sweep(rows, plot, title)
        print(f"wrote {png}", file=sys.stderr if as_json else sys.stdout)
    if not any(r.fits for r in rows):
        print("poprun-ipu: no combination fits in IPU memory; exit status 1", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def predict_one(name: str, plan: IpuPlan, profile: list, epochs: float, as_json: bool,
                report_dir: Path | None = None) -> int:
    """One plan, as ``poprun-ipu predict --preset`` prints it: exit status 1 when it does not fit."""
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    if as_json:
        print(json.dumps({"schema": ipu_text.JSON_SCHEMA, "predictions": [
            {**ipu_text.prediction_dict(name, plan, epochs, profile), "config": name}]}, indent=1))
    else:
        print(ipu_text.describe(name, plan, epochs, report_dir, profile))
    if not fit(plan, profile).fits:
        print(f"poprun-ipu: {name} ({plan.chip}) does not fit in IPU memory (the out-of-memory lines above say "
              "what to change); exit status 1", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def profile_plan(base: Base, grid: dict[str, tuple], out: Path, as_json: bool, top: int,
                 profile_for: ProfileSource = load_profile, splits: tuple[str, ...] = ()) -> int:
    """``profile --config|--preset|--onnx`` with plan options: the per-layer profile of one plan."""
    from ipu.cost.prediction import predict

    if is_sweep(grid):
        many = next(f for f, v in grid.items() if len(v) > 1)
        flag = next(o.flag for o in PLAN_OPTIONS if o.field == many)
        raise UsageError(f"profile takes one configuration, but {flag} has {len(grid[many])} values: "
                         "give one (use predict for a sweep)")
    plan = one_plan(base, combinations(grid)[0], splits)
    ipu_text.show_profile(base.name, predict(plan, profile_for(plan)), plan.chip, out, as_json, top)
    return 0


def one_plan(base: Base, choice: dict, splits: tuple[str, ...]) -> IpuPlan:
    plan = plan_for(base.plan, choice, base.momentum, splits)
    if splits and plan.pipeline_splits != splits:
        raise UsageError(f"--pipeline-splits {','.join(splits)} makes {len(splits) + 1} stages but the plan has "
                         f"{plan.ipus_per_replica} IPUs per replica: give --ipus-per-replica {len(splits) + 1} "
                         f"or {plan.ipus_per_replica - 1} split names")
    return plan


def validate(chip: str | None, as_json: bool) -> int:
    """``validate``: the model's parts and its ResNet-50 predictions against public figures."""
    from ipu.cost.validation import comparisons, components, format_comparisons, format_components

    rows = comparisons(chip)
    parts = components()
    if as_json:
        print(json.dumps(ipu_text.validation_dict(parts, rows), indent=1))
    else:
        print("Components, each against its own public figure:")
        print(format_components(parts))
        print("\nEnd to end (ratio = predicted / published throughput, or published / predicted time):")
        print(format_comparisons(rows))
    return 0


def show_op_checks(chip: str | None, as_json: bool) -> int:
    """``validate --ops``: every layer kind against poplibs' IPU Model benchmark table."""
    from ipu.cost.evidence.poplibs_benchmarks import SOURCE
    from ipu.cost.op_validation import checks, format_rows, format_summary, summarise

    rows = checks(chip)
    summary = summarise(rows)
    if as_json:
        print(json.dumps(ipu_text.op_validation_dict(rows, summary), indent=1))
    else:
        print(f"Per kind of op, the model's cycles over the IPU Model's ({SOURCE}):")
        print(format_summary(summary))
        print("\nPer benchmark:")
        print(format_rows(rows))
    return 0


def show_sensitivity(presets: Sequence[str], chip: str | None, as_json: bool) -> int:
    """``validate --sensitivity``: how each assumed constant at x0.5 and x1.5 moves each preset's step time."""
    from ipu.cost.sensitivity import FACTORS, format_sensitivity, sensitivity

    rows = sensitivity(presets, chip)
    if as_json:
        print(json.dumps(ipu_text.sensitivity_dict(rows), indent=1))
    else:
        print(f"Step time change (%) with each constant at x{FACTORS[0]:g} / x{FACTORS[1]:g}, one at a time:")
        print(format_sensitivity(rows))
    return 0


def check_onnx(path: str, image_size: int | None, splits: tuple[str, ...]) -> int:
    """``check --onnx FILE``: every blocker of the file, to predict and to train (``models.onnx.check``), one a
    line; 0 when there is none, else 2."""
    from models.onnx import OnnxFile
    from models.onnx.check import check_file

    report = check_file(OnnxFile(path, f"--onnx {path}"), image_size, splits)
    print("\n".join(report.lines()))
    if report.clean:
        return 0
    print(f"poprun-ipu: {path} cannot {'predict or train' if not report.predict.clean else 'train'} as it is "
          "(one line per blocker above); exit status 2", file=sys.stderr)
    return EXIT_BLOCKED
