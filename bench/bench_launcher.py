"""Launcher costs at N instances, poprun_py versus calling mpiexec directly.

    python bench/bench_launcher.py [--instances 4] [--repeats 10]

1. Overhead: a no-op job. Both sides start the same interpreter doing nothing on every rank,
   through the same mpiexec; the difference is what poprun_py adds (its own start, validation,
   the per-instance agent, output relaying, teardown).
2. Failure teardown: instance 2 raises while the others wait in an all-reduce; the time from the
   raise until the launcher has exited. Baseline: mpiexec running ``python -m mpi4py`` (which
   calls MPI_Abort on an uncaught exception), the usual fix for MPI jobs that hang on a failure.
   MPI_Abort leaves MPICH's shared-memory files in /dev/shm: the benchmark counts and removes those
   of each side (poprun_py's agents remove their programs' own).
Prints medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(argv: list[str], repeats: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise SystemExit(f"{argv} failed: {res.stderr.decode()[-500:]}")
    return times


FAILING = """
import sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == min(2, comm.Get_size() - 1):
    open(sys.argv[1], "w").write(repr(time.time()))
    raise ValueError("bad batch")
comm.allreduce(1)
"""


def teardown_seconds(argv: list[str], stamp: str, repeats: int) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT)
    times = []
    for _ in range(repeats):
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT, timeout=120)
        end = time.time()
        with open(stamp) as f:
            times.append(end - float(f.read()))
    return statistics.median(times)


def _mpich_segments() -> set[str]:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("mpich")}
    except OSError:
        return set()


def _remove_new(before: set[str]) -> int:
    new = _mpich_segments() - before
    for name in new:
        try:
            os.unlink(os.path.join("/dev/shm", name))
        except OSError:
            pass
    return len(new)


def teardown(instances: int, repeats: int) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    script, stamp = os.path.join(ROOT, "bench", "failing.py"), os.path.join(ROOT, "bench", "failing.stamp")
    with open(script, "w") as f:
        f.write(FAILING)
    n = str(instances)
    before = _mpich_segments()
    try:
        base = teardown_seconds([mpiexec, "-n", n, sys.executable, "-m", "mpi4py", script, stamp], stamp, repeats)
    finally:  # MPI_Abort never reaches MPI_Finalize: the baseline leaves MPICH's shared-memory files behind
        left_by_base = _remove_new(before)
    before = _mpich_segments()
    ours = teardown_seconds([sys.executable, "-m", "poprun_py", "--num-instances", n, "--num-replicas", n,
                             "python", script, stamp], stamp, repeats)
    left_by_ours = _remove_new(before)
    print(f"\nMPICH files left in /dev/shm (removed here): {left_by_base} by the baseline, {left_by_ours} by poprun_py")
    print(f"\nfailure teardown, {instances} instances (raise -> launcher exited), median of {repeats}")
    print(f"{'launch':<34} {'seconds':>8} {'vs baseline':>12}")
    print(f"{'mpiexec + python -m mpi4py':<34} {base:8.3f} {1.0:11.2f}x")
    print(f"{'poprun_py (report + clean stop)':<34} {ours:8.3f} {ours / base:11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    n = str(args.instances)
    noop = [sys.executable, "-c", "pass"]
    rows = [
        ("mpiexec (baseline)", [mpiexec, "-n", n, *noop]),
        ("poprun_py", [sys.executable, "-m", "poprun_py", "--num-instances", n, "--num-replicas", n, *noop]),
        ("poprun_py, script via bootstrap", [sys.executable, "-m", "poprun_py", "--num-instances", n,
                                             "--num-replicas", n, sys.executable, os.path.join(ROOT, "bench", "noop.py")]),
    ]
    with open(os.path.join(ROOT, "bench", "noop.py"), "w") as f:
        f.write("")
    timed(rows[0][1], 1)  # warm the page cache
    results = {name: statistics.median(timed(argv, args.repeats)) for name, argv in rows}
    base = results["mpiexec (baseline)"]
    print(f"no-op job, {args.instances} instances, median of {args.repeats} runs, {os.cpu_count()} CPUs")
    print(f"{'launch':<34} {'seconds':>8} {'vs mpiexec':>11} {'overhead':>9}")
    for name, t in results.items():
        print(f"{name:<34} {t:8.3f} {t / base:10.2f}x {t - base:+8.3f}s")
    teardown(args.instances, max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
