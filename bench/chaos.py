"""Fault injection: short training jobs, each hit by one fault, must end bitwise where an
uninterrupted run ends.

    python bench/chaos.py [--jobs 10] [--seed 0] [--steps 20] [--every 5] [--hang-timeout 20]
    python bench/chaos.py --hosts 4 --faults 50 --seed 0    # host-level faults: bench/chaos_hosts.py

One uninterrupted run first (the baseline, also the timing reference). Then ``--jobs`` runs of
the same training under ``poprun_py --max-restarts 3``, each with one fault injected at an exact
point through ``POPRUN_FAULT`` (``poprun_py/faults.py``), on a randomly chosen instance:

* job 1: SIGKILL to instance 0 while it writes a checkpoint (the file is complete, not yet renamed);
* job 2: SIGSTOP at a random update: a hang, which ``--hang-timeout`` must catch;
* the others: SIGKILL at a random update.

A job survives when the launcher exits 0 after at least one restart, its final checkpoint holds
bitwise the same arrays (weights, optimizer state, EMA, loss scale) as the baseline's, and its
per-update losses are bitwise the baseline's. Printed per job: the fault, the attempts, the
recovery time (fault to restarted attempt: detection, teardown and relaunch) and the wall-time
cost against the baseline (recovery plus the updates redone since the last checkpoint); then
survived/total. The whole run stops starting jobs after ``--time-limit`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from launch.train import checkpoint as ckpt  # noqa: E402
from poprun_py.faults import INJECTED, Fault  # noqa: E402

INSTANCES, REPLICAS = 2, 4


def train_args(steps: int, every: int) -> list[str]:
    """A small dense model on the bundled Fashion-MNIST subset: seconds per run."""
    return ["--config", "dense", "--set", "model.options={hidden: [32]}", "--set", "data.micro_batch=32",
            "--set", f"run.max_steps={steps}", "--set", f"run.checkpoint_every={every}",
            "--set", "run.plots=false", "--set", "run.progress_bar=false", "--set", "run.evaluate=false",
            "--set", "run.checksum_every=5", "--set", "ema.decay=0.9", "--set", "schedule.warmup_steps=2"]


def plan_faults(jobs: int, seed: int, steps: int, every: int, instances: int = INSTANCES) -> list[Fault]:
    """One fault per job: a checkpoint write, a hang, then SIGKILLs at random updates."""
    rng = random.Random(seed)
    checkpoints = list(range(every, steps + 1, every))
    faults = [Fault(0, f"checkpoint {rng.choice(checkpoints)}: renaming", signal.SIGKILL),
              Fault(rng.randrange(instances), f"step {rng.randint(1, steps)}", signal.SIGSTOP)]
    while len(faults) < jobs:
        faults.append(Fault(rng.randrange(instances), f"step {rng.randint(1, steps)}", signal.SIGKILL))
    return faults[:jobs]


@dataclass
class JobResult:
    fault: Fault | None
    returncode: int
    wall_s: float
    reasons: list[str] = field(default_factory=list)  # how each attempt ended
    recovery_s: float | None = None  # fault -> the restarted attempt started
    problems: list[str] = field(default_factory=list)
    output_tail: str = ""


def run_job(run_dir: Path, fault: Fault | None, *, steps: int, every: int, hang_timeout: float | None,
            timeout: float = 300.0) -> JobResult:
    """One training job under the launcher, with ``fault`` injected (None: the baseline)."""
    logs = run_dir / "logs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("POPDIST_", "POPRUN_", "PMI_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if fault is not None:
        env["POPRUN_FAULT"] = fault.encode()
    argv = [sys.executable, "-m", "poprun_py", "--num-instances", str(INSTANCES), "--num-replicas", str(REPLICAS),
            "--max-restarts", "3", "--log-dir", str(logs),
            *(["--hang-timeout", f"{hang_timeout:g}"] if hang_timeout else []),
            sys.executable, "-m", "launch.train", *train_args(steps, every), "--set", f"run.run_dir={run_dir}"]
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        code, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        code, out = -1, f"timed out after {timeout:g} s\n{err.stderr or ''}"
    result = JobResult(fault, code, time.perf_counter() - started, output_tail=out[-3000:])
    record = logs / "run.json"
    if record.exists():
        attempts = json.loads(record.read_text())["attempts"]
        result.reasons = [a["reason"] for a in attempts]
        fault_t = _fault_time(logs)
        if fault_t is not None and len(attempts) > 1:
            result.recovery_s = attempts[1]["started"] - fault_t
    return result


def _fault_time(logs: Path) -> float | None:
    """When the injected fault struck: the time stamp of its stderr line in the first attempt."""
    for path in sorted(logs.glob("attempt_0/instance_*/stderr.log")):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(INJECTED):
                match = re.search(r"t=([0-9.]+)$", line)
                if match:
                    return float(match.group(1))
    return None


def final_state(run_dir: Path) -> tuple[dict[str, np.ndarray], int, np.ndarray]:
    latest = ckpt.find_latest(run_dir)
    if latest is None:
        raise ValueError(f"no checkpoint in {run_dir}")
    arrays, meta = ckpt.load_checkpoint(latest)
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = np.array([r["loss"] for r in steps if r.get("event") == "step"])
    return arrays, meta["step"], losses


def check(result: JobResult, run_dir: Path, baseline: Path, steps: int) -> None:
    """Fill ``result.problems``: what makes this job not a survivor."""
    if result.returncode != 0:
        result.problems.append(f"exit code {result.returncode}")
        return
    if len(result.reasons) < 2:
        result.problems.append(f"the fault did not cause a restart (attempts: {result.reasons})")
    result.problems += bitwise_problems(run_dir, baseline, steps)


def bitwise_problems(run_dir: Path, baseline: Path, steps: int) -> list[str]:
    """How the run's final checkpoint (at update ``steps``) and per-update losses differ from the
    baseline's; empty when they are bitwise the same."""
    try:
        got, step, losses = final_state(run_dir)
        want, _, want_losses = final_state(baseline)
    except (ValueError, OSError, KeyError) as err:
        return [f"no final state: {err}"]
    problems = [] if step == steps else [f"the last checkpoint is at update {step}, not {steps}"]
    if set(got) != set(want):
        problems.append(f"checkpoint keys differ: {sorted(set(got) ^ set(want))}")
    differ = [k for k in want if k in got and not np.array_equal(got[k], want[k])]
    if differ:
        problems.append(f"{len(differ)} array(s) differ from the uninterrupted run, e.g. {differ[0]}")
    if losses.shape != want_losses.shape or not np.array_equal(losses, want_losses):
        problems.append("the per-update losses differ from the uninterrupted run")
    return problems


def describe(fault: Fault) -> str:
    return f"{signal.Signals(fault.signal).name} instance {fault.instance} at {fault.at!r}"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", "--faults", dest="jobs", type=int, default=10, help="jobs, one fault each")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hosts", type=int, default=0,
                   help="real hosts (network namespaces over ssh, needs root) for host-level faults: "
                        "bench/chaos_hosts.py; 0: instance faults on this host only")
    p.add_argument("--steps", type=int, help="weight updates per job (20; 8 with --hosts)")
    p.add_argument("--every", type=int, help="checkpoint every this many updates (5; 2 with --hosts)")
    p.add_argument("--hang-timeout", type=float, help="--hang-timeout of every job (seconds; 20; 8 with --hosts)")
    p.add_argument("--time-limit", type=float, help="start no job after this many seconds (900; 3600 with --hosts)")
    p.add_argument("--keep", action="store_true", help="keep the run folders (printed) for inspection")
    args = p.parse_args(argv)
    defaults = dict(steps=8, every=2, hang_timeout=8.0, time_limit=3600.0) if args.hosts else \
        dict(steps=20, every=5, hang_timeout=20.0, time_limit=900.0)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.jobs < 1 or args.steps < args.every or args.every < 1 or args.hosts == 1 or args.hosts < 0:
        p.error("need --jobs >= 1, 1 <= --every <= --steps and --hosts 0 or >= 2")
    if args.hosts:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import chaos_hosts

        return chaos_hosts.main(args)
    print(f"machine: {machine()}")
    work = Path(tempfile.mkdtemp(prefix="poprun_chaos_"))
    t0 = time.perf_counter()
    try:
        base = run_job(work / "baseline", None, steps=args.steps, every=args.every, hang_timeout=args.hang_timeout)
        if base.returncode != 0:
            print(f"the uninterrupted run failed (exit {base.returncode}):\n{base.output_tail}")
            return 1
        print(f"uninterrupted run: {args.steps} updates, {INSTANCES} instances x {REPLICAS // INSTANCES} replicas, "
              f"{base.wall_s:.1f} s\n")
        print(f"{'job':>3}  {'fault':<48} {'attempts':<22} {'recovery':>9} {'cost':>7}  result")
        survived, ran = 0, 0
        for n, fault in enumerate(plan_faults(args.jobs, args.seed, args.steps, args.every), 1):
            if time.perf_counter() - t0 > args.time_limit:
                print(f"--time-limit {args.time_limit:g} s reached: {args.jobs - ran} job(s) not run")
                break
            run_dir = work / f"job{n}"
            result = run_job(run_dir, fault, steps=args.steps, every=args.every, hang_timeout=args.hang_timeout)
            check(result, run_dir, work / "baseline", args.steps)
            ran += 1
            survived += not result.problems
            recovery = f"{result.recovery_s:.1f} s" if result.recovery_s is not None else "-"
            verdict = "bitwise equal" if not result.problems else "LOST: " + "; ".join(result.problems)
            print(f"{n:>3}  {describe(fault):<48} {','.join(result.reasons):<22} {recovery:>9} "
                  f"{result.wall_s - base.wall_s:>+6.1f}s  {verdict}", flush=True)
            if result.problems:
                print("     " + result.output_tail[-1500:].replace("\n", "\n     "))
        print(f"\nsurvived {survived}/{ran} (of {args.jobs} planned); recovery = fault to restarted attempt "
              f"(detection + teardown + relaunch), cost = job wall time minus the uninterrupted run's; "
              f"total {time.perf_counter() - t0:.0f} s; load average at end {os.getloadavg()[0]:.1f}")
        return 0 if survived == ran == args.jobs else 1
    finally:
        if args.keep:
            print(f"run folders kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
