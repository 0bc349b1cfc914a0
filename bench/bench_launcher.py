"""Launcher overhead: a no-op job at N instances, poprun_py versus calling mpiexec directly.

    python bench/bench_launcher.py [--instances 4] [--repeats 10]

Both sides start the same interpreter doing nothing on every rank, through the same mpiexec; the
difference is what poprun_py adds (its own start, validation, the per-instance agent, output
relaying, teardown). Prints the median wall time of each and their ratio.
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


if __name__ == "__main__":
    main()
