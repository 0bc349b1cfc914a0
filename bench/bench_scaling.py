"""Throughput with 1 and with 2 instances at the same global batch, on this machine.

    python bench/bench_scaling.py                       # default config, 4 replicas, 80 updates
    python bench/bench_scaling.py --config dense --steps 200

Runs ``python -m poprun_py --num-instances N --num-replicas R python -m launch.train`` for N = 1
(the baseline: one instance drives all R replicas) and N = 2 (R/2 replicas each), same config,
seed and global batch, evaluation off; the launcher gives each instance one thread per CPU it
owns. A third run, one instance pinned to one thread, separates the effect of threads from that
of processes. Images/s come from each run's ``metrics.jsonl``, skipping the first ``--warmup``
updates (compilation, first reads). Prints all three and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def run(instances: int, args, run_dir: Path, threads: int | None = None) -> float:
    cmd = [sys.executable, "-m", "poprun_py", "--num-instances", str(instances), "--num-replicas", str(args.replicas),
           sys.executable, "-m", "launch.train", "--config", args.config,
           "--set", f"run.max_steps={args.steps}", "--set", "run.evaluate=false", "--set", "run.plots=false",
           "--set", "run.progress_bar=false", "--set", f"data.replicas={args.replicas}",
           "--set", "schedule.kind=constant",  # a short run: no decay to fit in
           "--set", f"run.run_dir={run_dir}", *sum((["--set", s] for s in args.set), [])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POPDIST_", "POPRUN_"))}
    if threads:  # otherwise the launcher gives each instance one thread per CPU it owns
        env.update({name: str(threads) for name in THREAD_VARS})
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{instances} instance(s) failed:\n{proc.stderr[-3000:]}")
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["event"] == "step" and r["step"] >= args.warmup]
    seconds = sum(r["global_batch"] / r["images_per_s"] for r in steps)
    return sum(r["global_batch"] for r in steps) / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="default")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--set", action="append", default=[], help="extra config override")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = run(1, args, Path(tmp, "one"))
        one_thread = run(1, args, Path(tmp, "one-thread"), threads=1)
        two = run(2, args, Path(tmp, "two"))
    print(f"config {args.config}, {args.replicas} replicas, {args.steps} updates (first {args.warmup} skipped), "
          f"{os.cpu_count()} CPUs")
    print(f"{'1 instance x ' + str(args.replicas) + ' replicas (baseline)':36}{one:>10.1f} images/s")
    print(f"{'1 instance, 1 thread':36}{one_thread:>10.1f} images/s")
    print(f"{'2 instances x ' + str(args.replicas // 2) + ' replicas':36}{two:>10.1f} images/s")
    print(f"ratio 2 instances / 1 instance: {two / one:.2f}x (vs 1 instance on 1 thread: {two / one_thread:.2f}x)")


if __name__ == "__main__":
    main()
