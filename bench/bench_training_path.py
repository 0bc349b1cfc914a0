"""Where an update of the default job goes, and what the IPU's 16.16 numerics cost over 32.32.

    python bench/bench_training_path.py                  # 2 instances x 2 replicas, default config
    python bench/bench_training_path.py --steps 150 --warmup 30 --repeats 3

Runs the real job, ``python -m poprun_py --num-instances 2 --num-replicas 4 python -m launch.train``,
on the default config: 32.32 (the baseline) and 16.16 (the ``fmnist-16.16`` numerics: float16
inputs, weights and partials, stochastic rounding, loss scaling; ``ipu.emulate_precision``), each
stopped after ``--warmup`` and after ``--steps`` updates, ``--repeats`` times, the two precisions
alternated (the machine's speed drifts by more than the differences measured here; the table gives
the measurement with the median update time, the last line every measurement). Each run's
``summary.json`` gives the seconds of every phase (``ipu/runtime/phases.py``); the difference
between the long and the short run is the steady state, without start-up, numba cache loading and
the first reads. The default window, updates 30 to 150, stays inside the first epoch (156
updates). Prints per phase the share of the update time for both precisions, the share spent
outside the model, and the 16.16 update time as a ratio to the 32.32 one.

The difference of two runs' totals takes in every burst of the host's other load (one all-reduce
wait of a few hundred ms moves the share by points), so it also prints the same share update by
update: instance 0's ``metrics.jsonl`` gives each update's wall time (from one update's end to
the next's) and its model seconds (``model_s``); the median over the window of
``1 - model / wall``, and the median update time, for each measurement. Instance 0's share also
holds its wait in the all-reduce for a slower instance (on a shared host one instance can run
slower for a whole run), so each measurement also gives the share on the instance the others wait
for, the one that waits least in the all-reduce (``ipu.runtime.phases.critical_path``, from the
differences of totals): the training path's own cost around the model.

Then (``--blocks``, default 20) the same ratio where the machine's drift cannot reach it: both
precisions built in this one process as one instance of the job (``--replicas / --instances``
replicas, one thread, no all-reduce partner), stepped in alternating blocks of ``--block``
updates, so each block of one precision runs within a second of a block of the other. It prints
the median update time of each and their ratio, and the emulation's own phase.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402  (loaded before the header, so that it can name numpy's BLAS kernel)

from bench.bench_models import _cpu_model, _pools, _threads_seen  # noqa: E402
from ipu.runtime.phases import PHASES, critical_path  # noqa: E402
from launch.train.thread_report import describe_threads, oversubscribed_hosts  # noqa: E402

PRECISION_16 = ("ipu.precision=\"16.16\"", "ipu.emulate_precision=true", "ipu.stochastic_rounding=true",
                "loss_scaling.kind=static", "loss_scaling.initial_scale=128")


def run(args, steps: int, extra: tuple[str, ...], run_dir: Path) -> dict[str, float]:
    """Phase seconds and update seconds of one run of ``steps`` updates."""
    cmd = [sys.executable, "-m", "poprun_py", "--num-instances", str(args.instances), "--num-replicas",
           str(args.replicas), sys.executable, "-m", "launch.train", "--config", args.config,
           "--set", f"run.max_steps={steps}", "--set", "run.evaluate=false", "--set", "run.plots=false",
           "--set", "run.progress_bar=false", "--set", f"data.replicas={args.replicas}",
           "--set", "schedule.kind=constant",  # runs stopped early: no warmup or decay to fit in
           "--set", f"run.run_dir={run_dir}", *sum((["--set", s] for s in (*extra, *args.set)), [])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POPDIST_", "POPRUN_"))}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    out = {phase: summary[f"share_{phase}"] * summary["update_s"] for phase in PHASES}
    out["update_s"] = summary["update_s"]
    out["updates"] = summary["updates_this_run"]
    out["threads"] = summary.get("instance_threads", [])
    for key in ("instance_all_reduce_s", "instance_model_s", "instance_update_s"):
        out[key] = np.array(summary[key])
    # per update (instance 0's metrics): its wall time, tick to tick, and its model seconds
    steps_seen = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out["per_update"] = [(r["step"], r["global_batch"] / r["images_per_s"], r["model_s"]) for r in steps_seen
                         if r.get("event") == "step" and r.get("images_per_s")]
    if summary.get("skipped_updates"):
        print(f"note: {summary['skipped_updates']} update(s) skipped (non-finite gradients) in {run_dir.name}")
    return out


def steady(args, extra: tuple[str, ...], tmp: Path, name: str) -> dict[str, float]:
    """Phase seconds per update between update ``--warmup`` and update ``--steps``."""
    short = run(args, args.warmup, extra, tmp / f"{name}-short")
    long = run(args, args.steps, extra, tmp / f"{name}-long")
    updates = long["updates"] - short["updates"]
    window = [(wall, model) for step, wall, model in long["per_update"] if args.warmup <= step < args.steps]
    return {**{k: (long[k] - short[k]) / updates for k in (*PHASES, "update_s")}, "threads": long["threads"],
            "instance_all_reduce": (long["instance_all_reduce_s"] - short["instance_all_reduce_s"]) / updates,
            **critical_path(*((long[k] - short[k]).tolist()
                              for k in ("instance_model_s", "instance_all_reduce_s", "instance_update_s"))),
            "median_update_s": float(np.median([wall for wall, _ in window])),
            "median_outside": float(np.median([1 - model / wall for wall, model in window]))}


def interleaved(args, extra: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per precision: the median seconds of an update and the mean seconds per phase, over
    ``args.blocks`` blocks of ``args.block`` updates, the two precisions' blocks alternated."""
    import models
    import poprun_py as popdist
    from launch.train.build import build_training
    from launch.train.config_file import load_config
    from launch.train.distribute import placement
    from poprun_py.comm import LoopbackComm

    models.set_num_threads(1)  # as each instance of the job (its threads line above)
    common = [f"data.replicas={args.replicas // args.instances}", "schedule.kind=constant", "run.evaluate=false",
              *args.set]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, precision in (("32", ()), ("16", extra)):
            cfg = load_config(args.config, [*common, *precision, f"run.run_dir={tmp}/{name}"])
            training = build_training(cfg, LoopbackComm(), placement(cfg, popdist.init()))
            runs[name] = {"training": training, "batches": iter(training.loader), "updates": [],
                          "phases": dict.fromkeys(PHASES, 0.0)}

        def step(r) -> None:
            batch = next(r["batches"], None)
            if batch is None:  # a new epoch
                r["batches"] = iter(r["training"].loader)
                batch = next(r["batches"])
            start = time.perf_counter()
            r["training"].engine.train_steps([(batch.images, batch.labels)])
            r["updates"].append(time.perf_counter() - start)

        for r in runs.values():  # compile, fill the caches
            for _ in range(args.block):
                step(r)
            r["updates"].clear()
        for block in range(args.blocks):
            for name in (("32", "16") if block % 2 == 0 else ("16", "32")):
                r = runs[name]
                before = dict(r["training"].engine.phase_seconds().seconds)
                for _ in range(args.block):
                    step(r)
                after = r["training"].engine.phase_seconds().seconds
                for phase in PHASES:
                    r["phases"][phase] += after[phase] - before[phase]
    return {name: {"update_s": float(np.median(r["updates"])), "updates": len(r["updates"]),
                   **{phase: seconds / len(r["updates"]) for phase, seconds in r["phases"].items()}}
            for name, r in runs.items()}


def median_of(results: list[dict[str, float]]) -> dict[str, float]:
    """The measurement with the median update time (the lower of the two middle ones for an even
    count), whole: medians taken phase by phase would not add up to an update."""
    return sorted(results, key=lambda r: r["update_s"])[(len(results) - 1) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="default")
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--replicas", type=int, default=4, help="in all (default 4: 2 per instance)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3,
                   help="measurements of each precision, alternated (32.32 first, then 16.16 first, ...); "
                        "the table gives the one with the median update time (default 3)")
    p.add_argument("--blocks", type=int, default=20,
                   help="in-process A/B: blocks of updates of each precision, alternated (0: skip it)")
    p.add_argument("--block", type=int, default=10, help="updates per block of the in-process A/B")
    p.add_argument("--set", action="append", default=[], help="extra config override for both runs")
    args = p.parse_args()
    if not 0 < args.warmup < args.steps:
        raise SystemExit(f"--warmup {args.warmup} must be > 0 and below --steps {args.steps}")
    if args.blocks < 0 or args.block < 1:
        raise SystemExit(f"--blocks {args.blocks} must be >= 0 and --block {args.block} >= 1")
    if args.repeats < 1:
        raise SystemExit(f"--repeats {args.repeats} must be at least 1")
    load = os.getloadavg()
    precisions = {"32": (), "16": PRECISION_16}
    measured: dict[str, list[dict[str, float]]] = {"32": [], "16": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in precisions.items():  # compiles what the numba cache lacks, outside every measurement
            run(args, 2, extra, Path(tmp) / f"{name}-prime")
        for repeat in range(args.repeats):  # alternated, so that a drift of the machine's speed hits both
            for name in (("32", "16") if repeat % 2 == 0 else ("16", "32")):
                measured[name].append(steady(args, precisions[name], Path(tmp), f"{name}-{repeat}"))
    base, emulated = median_of(measured["32"]), median_of(measured["16"])
    print(f"CPU: {_cpu_model()}; load average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    print(f"numpy BLAS here: {_pools(_threads_seen())}")
    print(f"the job's instances (threadpoolctl inside each): {describe_threads(base['threads'])}")
    for members, count, cpus in oversubscribed_hosts(base["threads"]):
        print(f"WARNING: instances {members} run up to {count} threads on {cpus} CPUs: oversubscribed")
    print(f"config {args.config}, {args.instances} instances x {args.replicas // args.instances} replicas, "
          f"updates {args.warmup}..{args.steps} (steady state: the run to {args.steps} minus the run to "
          f"{args.warmup}); of {args.repeats} measurements of each precision, the one with the median update time")
    print(f"{'phase':<22}{'32.32 ms':>10}{'share':>8}{'16.16 ms':>10}{'share':>8}")
    for phase in PHASES:
        print(f"{phase:<22}{base[phase] * 1e3:>10.2f}{base[phase] / base['update_s']:>8.1%}"
              f"{emulated[phase] * 1e3:>10.2f}{emulated[phase] / emulated['update_s']:>8.1%}")
    for label, r in (("32.32", base), ("16.16", emulated)):
        other = r["update_s"] - sum(r[p] for p in PHASES)
        outside = 1 - r["model"] / r["update_s"]
        print(f"{label}: update {r['update_s'] * 1e3:.1f} ms; unmeasured {other * 1e3:.2f} ms; "
              f"outside the model {outside:.1%}")
    print(f"16.16 update time / 32.32 (baseline): {emulated['update_s'] / base['update_s']:.3f}x")
    shares = ", ".join(f"{1 - r['model'] / r['update_s']:.1%}" for r in measured["32"])
    ratios = ", ".join(f"{e['update_s'] / b['update_s']:.3f}x" for b, e in zip(measured["32"], measured["16"]))
    print(f"each measurement: 32.32 outside the model {shares}; 16.16 / 32.32 {ratios}")
    medians = ", ".join(f"{r['median_outside']:.1%} ({r['median_update_s'] * 1e3:.1f} ms)" for r in measured["32"])
    ratios = ", ".join(f"{e['median_update_s'] / b['median_update_s']:.3f}x"
                       for b, e in zip(measured["32"], measured["16"]))
    print(f"update by update (instance 0's metrics, updates {args.warmup}..{args.steps}), the median of each "
          f"measurement: 32.32 outside the model {medians}; 16.16 / 32.32 median update {ratios}")
    waits = "; ".join(" / ".join(f"{w * 1e3:.2f}" for w in r["instance_all_reduce"]) for r in measured["32"])
    print(f"32.32 all-reduce ms per update on each instance (0 / 1 / ...; the slowest instance waits least; "
          f"a difference of totals, so the first update's wait for the others' start-up, which differs "
          f"between the two runs, can make it negative), each measurement: {waits}")
    critical = "; ".join(f"instance {r['critical_instance']} {r['critical_outside_model_share']:.1%} (each instance's "
                         f"wait for it: {' / '.join(f'{w:.1%}' for w in r['instance_wait_share'])})"
                         for r in measured["32"] if r.get("instance_wait_share"))
    print(f"32.32 outside the model on the instance the others wait for (the one that waits least in the all-reduce; "
          f"differences of totals), each measurement: {critical}")
    if args.blocks > 0:
        ab = interleaved(args, PRECISION_16)
        base, emulated = ab["32"], ab["16"]
        print(f"in one process, {args.replicas // args.instances} replicas on one thread, {args.blocks} blocks of "
              f"{args.block} updates of each precision, alternated: median update 32.32 "
              f"{base['update_s'] * 1e3:.2f} ms, 16.16 {emulated['update_s'] * 1e3:.2f} ms: "
              f"16.16 / 32.32 = {emulated['update_s'] / base['update_s']:.3f}x")
        print("  mean ms per update, phase by phase (32.32 / 16.16): " + ", ".join(
            f"{phase} {base[phase] * 1e3:.2f} / {emulated[phase] * 1e3:.2f}" for phase in PHASES
            if base[phase] or emulated[phase]))


if __name__ == "__main__":
    main()
