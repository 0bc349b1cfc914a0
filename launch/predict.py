"""``poprun-ipu``: memory fit and predicted POD cost of any configuration, and what-if sweeps.

    poprun-ipu predict --config g16-b4-pod16 --set data.micro_batch=2
    poprun-ipu predict --config g16-b4-pod16 --system POD16,POD64,POD256 --micro-batch 2,3,4 \\
        --ipus-per-replica 2,4 [--json] [--plot sweep.png]
    poprun-ipu profile --config g16-b4-pod64 --precision 16.32 --out docs/img
    poprun-ipu predict --onnx my_net.onnx --image-size 224 --system POD16,POD64 [--pipeline-splits layer3]
    poprun-ipu predict --preset g16-b4-pod64 | --all; profile --preset NAME; validate   (ipu/cli.py)

``--config NAME`` (an entry of ``launch/configs.yml`` or ``file.yml[:name]``) with ``--set key=value``
takes the keys and the validation of ``poprun-train``; ``--preset NAME`` starts from an ``ipu.plan`` preset.
The plan options (``launch.sweep.PLAN_OPTIONS``) override either; each may be a comma list, and then
``predict`` prints one row per combination (``launch.sweep_report``). Without ``--config`` or plan options
the command is ``ipu.cli``'s, unchanged. ``--onnx FILE`` takes the layer profile from the user's own network
(``launch.onnx_source``); the plan starts from ``--config``/``--preset``, else from the ``resnet50-pod16``
preset (16 x 1 IPU, micro-batch 20, GA 6, ImageNet). Exit status: 0; 1 when the plan (a sweep: every combination)
does not fit in IPU memory; 2 for a usage error (the message names the flag and the fix).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu import cli as ipu_cli
from ipu.plan import IMAGENET_TRAIN_IMAGES, PRESETS, IpuPlan, get_preset, load_profile
from launch.build import ipu_plan
from launch.config import load_config
from launch.onnx_source import open_onnx
from launch.sweep import PLAN_OPTIONS, UsageError, combinations, is_sweep, parse_grid, plan_for
from launch.sweep_report import ProfileSource, format_table, plot_sweep, sweep, sweep_dict

EXIT_DOES_NOT_FIT, EXIT_USAGE = 1, 2
IMAGENET_CLASSES = 1000
ONNX_BASE = "resnet50-pod16"  # the plan of --onnx without --config or --preset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poprun-ipu", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="memory fit and predicted cost of a configuration, or a sweep of them")
    q = sub.add_parser("profile", help="per-layer cycles of one configuration by IPU, pass and category (table + PNG)")
    sub.add_parser("validate", add_help=False)  # ipu.cli's own
    for s in (p, q):
        which = s.add_mutually_exclusive_group()
        which.add_argument("--config", metavar="NAME", help="a configuration of launch/configs.yml, or FILE.yml[:NAME]")
        which.add_argument("--preset", choices=sorted(PRESETS), help="a named IPU plan")
        if s is p:
            which.add_argument("--all", action="store_true", help="every preset")
        s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a configuration key, as poprun-train --set (with --config)")
        for o in PLAN_OPTIONS:
            s.add_argument(o.flag, metavar="V[,V...]", help=o.help)
        s.add_argument("--onnx", metavar="FILE", help="your own network: an ONNX file (docs/ipu.md, 'Your own model')")
        s.add_argument("--num-classes", type=int, metavar="N", help="with --onnx: the classes the graph must have")
        s.add_argument("--pipeline-splits", metavar="NAME[,NAME...]",
                       help="the blocks (or ONNX nodes) that start pipeline stages 2, 3, ... (default: automatic)")
        s.add_argument("--json", action="store_true", help="print the figures as JSON (a stable interface)")
    p.add_argument("--epochs", type=float, help="epochs for the time to train (default: the configuration's)")
    p.add_argument("--report-dir", type=Path, help="one plan: write memory_<name>.png and timeline_<name>.png here")
    p.add_argument("--plot", type=Path, metavar="PNG", help="a sweep: write images/s against POD size here")
    q.add_argument("--out", type=Path, default=Path("."), help="directory for profile_<name>_<chip>.png")
    q.add_argument("--top", type=int, default=25, help="layers per IPU in the table, most expensive first (0: all)")
    return parser


@dataclass(frozen=True)
class Base:
    """What the plan options start from: a configuration's (or preset's) plan and its name."""

    name: str
    plan: IpuPlan
    momentum: float = 0.0  # the optimizer's, for --optimizer sgd/nesterov
    note: str = ""  # what was assumed (stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, _ = build_parser().parse_known_args(argv)
    given = {o.field: getattr(args, _dest(o.flag), None) for o in PLAN_OPTIONS} if args.command != "validate" else {}
    ours = args.command != "validate" and (args.onnx or args.pipeline_splits or args.num_classes is not None)
    if args.command == "validate" or not (args.config or args.set or _new_options(given) or ours):
        return ipu_cli.main(argv)
    build_parser().parse_args(argv)  # unknown arguments: argparse's usage error
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    profile_for, splits = load_profile, _splits(args.pipeline_splits)
    try:
        if getattr(args, "all", False):
            raise UsageError("--all takes no plan options nor --config: give --config NAME or --preset NAME")
        if not (args.config or args.preset or args.onnx):
            raise UsageError("give --config NAME, --preset NAME or --onnx FILE")
        if args.num_classes is not None and not args.onnx:
            raise UsageError("--num-classes goes with --onnx FILE (a configuration's classes are its dataset's)")
        grid = parse_grid(given)
        base = base_plan(args.config, args.preset or (None if args.config else ONNX_BASE), args.set)
        if args.onnx:
            profile_for, plan = open_onnx(args.onnx, base.plan, grid.get("image_size", ()), args.num_classes, splits)
            base = Base(f"{Path(args.onnx).stem}", plan, base.momentum, base.note)
    except (UsageError, ValueError) as err:
        return _usage(err)
    if base.note:
        print(f"poprun-ipu: {base.note}", file=sys.stderr)
    try:
        if args.command == "profile":
            return _profile(args, base, grid, profile_for, splits)
        return _predict(args, base, grid, profile_for, splits)
    except ValueError as err:  # a pipeline split that the profile has no block for, a graph that cannot be read
        return _usage(err)


def _splits(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    names = tuple(t.strip() for t in text.split(","))
    if not all(names):
        raise SystemExit(_usage(UsageError(f"--pipeline-splits {text!r} has an empty name: give block names "
                                           "separated by commas, e.g. --pipeline-splits layer2,layer3")))
    return names


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _new_options(given: dict[str, str | None]) -> bool:
    """Plan options that ``ipu.cli`` does not take (its ``--chip`` is one value)."""
    return any(v is not None for f, v in given.items() if f != "chip") or "," in (given.get("chip") or "")


def _usage(err: Exception) -> int:
    print(f"poprun-ipu: error: {err}", file=sys.stderr)
    return EXIT_USAGE


def base_plan(config: str | None, preset: str | None, sets: Sequence[str]) -> Base:
    """The plan of ``--config`` (with ``--set``) or of ``--preset``."""
    if preset:
        if sets:
            raise UsageError(f"--set needs --config (a preset has no configuration keys): use --config with a "
                             f"configs.yml entry, or the plan options (--micro-batch ...) with --preset {preset}")
        return Base(preset, get_preset(preset))
    try:
        cfg = load_config(config or "default", list(sets))
    except ValueError as err:
        raise UsageError(f"--config {config} {' '.join('--set ' + s for s in sets)}: {err}".replace("  ", " ")) from None
    shape, classes, images, note = _dataset_facts(cfg)
    try:
        plan = ipu_plan(cfg, shape, classes, images)
    except ValueError as err:
        raise UsageError(f"--config {config}: no IPU-POD can run this configuration: {err}") from None
    return Base(str(config), plan, cfg.optim.momentum, note)


def _dataset_facts(cfg) -> tuple[tuple[int, int, int], int, int, str]:
    """Image shape, classes and training images of the configuration's dataset; ImageNet's (at the model's
    ``resolution`` option, else 224) when the file is not here (a prediction needs no data)."""
    from data.dataset import open_dataset
    from data.sources import dataset_path

    path = Path(dataset_path(cfg.data.path))
    if path.is_file():
        info = open_dataset(path, "train").info
        return info.image_shape, info.num_classes, info.num_samples, ""
    size = int(cfg.model.kwargs.get("resolution", 224))
    return ((size, size, 3), IMAGENET_CLASSES, IMAGENET_TRAIN_IMAGES,
            f"{cfg.data.path} is not here: assuming ImageNet ({IMAGENET_CLASSES} classes, "
            f"{IMAGENET_TRAIN_IMAGES:,} training images, {size}x{size}x3)")


def _one_plan(base: Base, choice: dict, splits: tuple[str, ...]) -> IpuPlan:
    plan = plan_for(base.plan, choice, base.momentum, splits)
    if splits and plan.pipeline_splits != splits:
        raise UsageError(f"--pipeline-splits {','.join(splits)} makes {len(splits) + 1} stages but the plan has "
                         f"{plan.ipus_per_replica} IPUs per replica: give --ipus-per-replica {len(splits) + 1} "
                         f"or {plan.ipus_per_replica - 1} split names")
    return plan


def _predict(args, base: Base, grid: dict[str, tuple], profile_for: ProfileSource = load_profile,
             splits: tuple[str, ...] = ()) -> int:
    epochs = base.plan.epochs if args.epochs is None else args.epochs
    choices = combinations(grid)
    if not is_sweep(grid):
        try:
            plan = _one_plan(base, choices[0], splits)
            profile = profile_for(plan)
        except ValueError as err:
            return _usage(err)
        return predict_one(base.name, plan, profile, epochs, args.json, args.report_dir)
    if args.report_dir:
        return _usage(UsageError("--report-dir writes one plan's pictures: with a sweep, use --plot PNG"))
    if splits and not any(c.get("ipus_per_replica", base.plan.ipus_per_replica) == len(splits) + 1 for c in choices):
        return _usage(UsageError(f"--pipeline-splits {','.join(splits)} makes {len(splits) + 1} stages but no "
                                 f"combination has {len(splits) + 1} IPUs per replica"))
    rows = sweep(base.plan, choices, profile_for, epochs, base.momentum, splits)
    if all(r.plan is None for r in rows):
        return _usage(UsageError(f"no combination can run; the first: {rows[0].error}"))
    title = f"{base.name}: {base.plan.model} at {base.plan.image_size}px, {epochs:g} epochs"
    if args.json:
        print(json.dumps(sweep_dict(base.name, rows, epochs, grid), indent=1))
    else:
        print(format_table(rows, title))
    if args.plot:
        png = plot_sweep(rows, args.plot, title)
        print(f"wrote {png}", file=sys.stderr if args.json else sys.stdout)
    if not any(r.fits for r in rows):
        print("poprun-ipu: no combination fits in IPU memory; exit status 1", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def predict_one(name: str, plan: IpuPlan, profile: list, epochs: float, as_json: bool,
                report_dir: Path | None = None) -> int:
    """One plan, as ``poprun-ipu predict --preset`` prints it: exit status 1 when it does not fit."""
    from ipu.memory import fit

    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    if as_json:
        print(json.dumps({"schema": ipu_cli.JSON_SCHEMA, "predictions": [
            {**ipu_cli.prediction_dict(name, plan, epochs, profile), "config": name}]}, indent=1))
    else:
        print(ipu_cli.describe(name, plan, epochs, report_dir, profile))
    if not fit(plan, profile).fits:
        print(f"poprun-ipu: {name} ({plan.chip}) does not fit in IPU memory (the out-of-memory lines above say "
              "what to change); exit status 1", file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def _profile(args, base: Base, grid: dict[str, tuple], profile_for: ProfileSource = load_profile,
             splits: tuple[str, ...] = ()) -> int:
    from ipu.cost.prediction import predict

    if is_sweep(grid):
        many = next(f for f, v in grid.items() if len(v) > 1)
        flag = next(o.flag for o in PLAN_OPTIONS if o.field == many)
        return _usage(UsageError(f"profile takes one configuration, but {flag} has {len(grid[many])} values: "
                                 "give one (use predict for a sweep)"))
    try:
        plan = _one_plan(base, combinations(grid)[0], splits)
        prediction = predict(plan, profile_for(plan))
    except ValueError as err:
        return _usage(err)
    ipu_cli.show_profile(base.name, prediction, plan.chip, args.out, args.json, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
