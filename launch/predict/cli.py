"""``poprun-ipu``: memory fit, predicted POD cost, per-layer profile and validation of any configuration, no training.

    poprun-ipu predict --preset g16-b4-pod64 [--chip bow] [--json]
    poprun-ipu predict --all --chip mk2 --report-dir out/   # every preset; also memory and timeline PNGs
    poprun-ipu predict --config g16-b4-pod16 --set data.micro_batch=2
    poprun-ipu predict --config g16-b4-pod16 --system POD16,POD64,POD256 --micro-batch 2,3,4 \\
        --ipus-per-replica 2,4 [--json] [--plot sweep.png]
    poprun-ipu predict --onnx my_net.onnx --image-size 224 --system POD16,POD64 [--pipeline-splits layer3]
    poprun-ipu profile --config g16-b4-pod64 --precision 16.32 --out docs/img   # table + PNG
    poprun-ipu check --onnx my_net.onnx [--image-size 224]  # every blocker of the file, to predict and to train
    poprun-ipu validate                                      # components and ResNet-50 vs public figures
    poprun-ipu validate --sensitivity [--preset NAME ...]    # each assumed constant at x0.5 and x1.5
    poprun-ipu validate --ops [--chip mk1|mk2]               # each layer kind vs poplibs' IPU Model cycles

``--config NAME`` (an entry of ``launch/train/configs.yml`` or ``file.yml[:name]``) with ``--set key=value``
takes the keys and the validation of ``poprun-train``; ``--preset NAME`` starts from an ``ipu.plan`` preset.
The plan options (``launch.predict.sweep.PLAN_OPTIONS``) override either; each may be a comma list, and then
``predict`` prints one row per combination (``launch.predict.sweep_report``). ``--onnx FILE`` takes the layer
profile from the user's own network (``launch.predict.base.onnx_base``, ``models.onnx``); the plan starts from ``--config``/``--preset``,
else from the ``resnet50-pod16`` preset (16 x 1 IPU, micro-batch 20, GA 6, ImageNet). Exit status: 0; 1 when
the plan (a sweep: every combination, ``--all``: any preset) does not fit in IPU memory, after printing
everything, the hypothetical prediction included; 2 for a usage error (the message names the flag and the fix),
and for ``check`` when anything stops the file from predicting or training (after listing every blocker).
The same as ``python -m launch.predict``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ipu.plan import PRESETS, load_profile
from ipu.specs import CHIPS
from launch.predict.base import base_plan, onnx_base
from launch.predict.commands import (check_onnx, predict_plans, predict_presets, profile_plan, profile_preset, show_op_checks,
                                     show_sensitivity, validate)
from launch.predict.sweep import PLAN_OPTIONS, UsageError, parse_grid

EXIT_USAGE = 2
ONNX_BASE = "resnet50-pod16"  # the plan of --onnx without --config or --preset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="poprun-ipu", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", allow_abbrev=False, help="memory fit and predicted cost of a configuration, or a sweep of them")
    q = sub.add_parser("profile", allow_abbrev=False, help="per-layer cycles of one configuration by IPU, pass and category (table + PNG)")
    c = sub.add_parser("check", allow_abbrev=False,
                       help="every blocker of an ONNX file, to predict and to train, one line each (exit 2 if any)")
    c.add_argument("--onnx", metavar="FILE", required=True, help="your own network: an ONNX file (docs/onnx.md)")
    c.add_argument("--image-size", type=int, metavar="N",
                   help="the image size to check at (default: the graph's, else 224)")
    c.add_argument("--pipeline-splits", metavar="NAME[,NAME...]",
                   help="also check these pipeline splits, as predict --pipeline-splits and ipu.pipeline_splits take them")
    v = sub.add_parser("validate", allow_abbrev=False, help="compare the model's parts and ResNet-50 predictions with public figures")
    for s in (p, q):
        which = s.add_mutually_exclusive_group()
        which.add_argument("--config", metavar="NAME",
                           help="a configuration of launch/train/configs.yml, or FILE.yml[:NAME]")
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
                       help="the blocks, ONNX nodes or torch module paths that start pipeline stages 2, 3, ... "
                            "(default: automatic)")
    p.add_argument("--epochs", type=float, help="epochs for the time to train (default: the configuration's)")
    p.add_argument("--report-dir", type=Path, help="one plan: write memory_<name>.png and timeline_<name>.png here")
    p.add_argument("--plot", type=Path, metavar="PNG", help="a sweep: write images/s against POD size here")
    q.add_argument("--out", type=Path, default=Path("."), help="directory for profile_<name>_<chip>.png")
    q.add_argument("--top", type=int, default=25, help="layers per IPU in the table, most expensive first (0: all)")
    v.add_argument("--sensitivity", action="store_true",
                   help="instead: how each assumed constant at x0.5 and x1.5 moves each preset's step time")
    v.add_argument("--ops", action="store_true",
                   help="instead: every layer kind against poplibs' IPU Model benchmark table, per kind and row")
    v.add_argument("--preset", action="append", choices=sorted(PRESETS), dest="presets",
                   help="with --sensitivity: only this preset (repeatable; default: every preset)")
    v.add_argument("--chip", choices=sorted(CHIPS), help="the IPU (default: all)")
    for s in (p, q, v):
        s.add_argument("--json", action="store_true", help="print the figures as JSON (a stable interface)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "validate":
            return _validate(args)
        if args.command == "check":
            if args.image_size is not None and args.image_size < 1:
                raise UsageError(f"--image-size {args.image_size}: give a positive number of pixels")
            return check_onnx(args.onnx, args.image_size, _splits(args.pipeline_splits))
        return _predict_or_profile(args)
    except ValueError as err:  # a bad value, a pipeline split the profile has no block for, an unreadable graph
        return _usage(err)


def _validate(args) -> int:
    if args.ops:
        if args.sensitivity or args.presets:
            raise UsageError("--ops checks single ops against poplibs' table, not presets: drop --sensitivity/--preset")
        if args.chip == "bow":
            raise UsageError("--ops --chip bow: poplibs' table has IPU Model rows for mk1 and mk2 only; "
                             "use --chip mk2 (Bow's tile is the same)")
        return show_op_checks(args.chip, args.json)
    if args.sensitivity:
        return show_sensitivity(args.presets or sorted(PRESETS), args.chip, args.json)
    if args.presets:
        raise UsageError("--preset goes with --sensitivity (validate compares fixed presets); "
                         "add --sensitivity or drop --preset")
    return validate(args.chip, args.json)


def _predict_or_profile(args) -> int:
    given = {o.field: getattr(args, _dest(o.flag), None) for o in PLAN_OPTIONS}
    grid = parse_grid(given)
    splits = _splits(args.pipeline_splits)
    every = getattr(args, "all", False)
    ours = args.config or args.set or args.onnx or splits or args.num_classes is not None
    if not ours and not _new_options(given) and (args.preset or every):  # a preset as it is, on one chip
        chip = grid.get("chip", (None,))[0]
        if args.command == "profile":
            return profile_preset(args.preset, chip, args.out, args.json, args.top)
        return predict_presets(sorted(PRESETS) if every else [args.preset], chip, args.epochs, args.json,
                               args.report_dir)
    if every:
        raise UsageError("--all takes no plan options nor --config: give --config NAME or --preset NAME")
    if not (args.config or args.preset or args.onnx):
        raise UsageError("give --config NAME, --preset NAME or --onnx FILE")
    if args.num_classes is not None and not args.onnx:
        raise UsageError("--num-classes goes with --onnx FILE (a configuration's classes are its dataset's)")
    base = base_plan(args.config, args.preset or (None if args.config else ONNX_BASE), args.set, bool(args.onnx))
    profile_for = load_profile
    if args.onnx:
        # with --config, the image size of its dataset (as poprun-train would run it), unless --image-size is given
        sizes = grid.get("image_size") or ((base.plan.image_size,) if args.config else ())
        profile_for, base = onnx_base(args.onnx, base, sizes, args.num_classes, splits)
    if base.note:
        print(f"poprun-ipu: {base.note}", file=sys.stderr)
    if args.command == "profile":
        return profile_plan(base, grid, args.out, args.json, args.top, profile_for, splits)
    return predict_plans(base, grid, args.epochs, args.json, args.report_dir, args.plot, profile_for, splits)


def _splits(text: str | None) -> tuple[str, ...]:
    if text is None:
        return ()
    names = tuple(t.strip() for t in text.split(","))
    if not all(names):
        raise UsageError(f"--pipeline-splits {text!r} has an empty name: give block names "
                         "separated by commas, e.g. --pipeline-splits layer2,layer3")
    return names


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _new_options(given: dict[str, str | None]) -> bool:
    """Plan options other than one ``--chip``, which a preset takes as it is."""
    return any(v is not None for f, v in given.items() if f != "chip") or "," in (given.get("chip") or "")


def _usage(err: Exception) -> int:
    print(f"poprun-ipu: error: {err}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
