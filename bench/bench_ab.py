"""A/B of one benchmark row between two source trees, their steps alternated in the same minutes.

    python bench/bench_ab.py OLD_TREE NEW_TREE --row b4-g16-gn --steps 12 [--threads 2]
    git worktree add /tmp/old HEAD~3   # (or: git archive HEAD~3 | tar -x -C /tmp/old) for OLD_TREE

On a shared or virtual machine the speed drifts by more than most changes (the same commit measured
10 % apart an hour later, and 1.13x against 1.80x PyTorch in two runs of ``bench_models.py``). Here
each tree gets one worker process (its own ``models/``, imported from that tree) that builds the row
(``bench_models.ROWS``: a training step of a model, or a layer's forward + backward), warms up, and
then runs one step per request; the driver alternates the requests (A B, B A, ...), so both trees
see the same load. Prints each tree's best and median step and their ratio (new / old: < 1, the
new tree is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(tree: str, row: str, threads: int) -> None:
    """Build ``row`` with ``tree``'s ``models/``; answer each line on stdin with one step's seconds."""
    import importlib.util
    import time

    sys.path[:0] = [tree]  # that tree's models/ first
    spec = importlib.util.spec_from_file_location("bench_models_here", ROOT / "bench" / "bench_models.py")
    rows = importlib.util.module_from_spec(spec)  # this tree's row table, whatever that tree's bench/ holds
    spec.loader.exec_module(rows)
    import models

    models.set_num_threads(threads)
    step = rows.make_step(row)
    step()
    step()
    print("ready", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        step()
        print(time.perf_counter() - start, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="source tree A (the baseline)")
    parser.add_argument("new", help="source tree B")
    parser.add_argument("--row", default="b4-g16-gn", help="a row of bench_models.py")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per tree")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        tree, row, threads = args.worker
        return worker(tree, row, int(threads))
    sys.path.insert(0, str(ROOT))
    from bench.bench_models import ROWS

    if args.row not in ROWS:
        parser.error(f"--row {args.row!r}: not one of {sorted(ROWS)}")
    trees = [str(Path(t).resolve()) for t in (args.old, args.new)]
    for tree in trees:
        if not (Path(tree) / "models" / "__init__.py").is_file():
            parser.error(f"{tree}: no models/ package there; give the root of a poprun_py source tree")
    procs = []
    for tree in trees:
        proc = subprocess.Popen([sys.executable, __file__, "a", "b", "--worker", tree, args.row, str(args.threads)],
                                cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":
            sys.exit(f"{tree}: the worker failed to build row {args.row}")
        procs.append(proc)
    times: list[list[float]] = [[], []]
    for i in range(args.steps):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            procs[j].stdin.write("step\n")
            procs[j].stdin.flush()
            times[j].append(float(procs[j].stdout.readline()) * 1e3)
    for proc in procs:
        proc.stdin.close()
        proc.wait()
    best = [min(t) for t in times]
    median = [statistics.median(t) for t in times]
    print(json.dumps({"row": args.row, "threads": args.threads, "steps": args.steps, "old": trees[0], "new": trees[1]}))
    print(f"old: best {best[0]:.1f} ms, median {median[0]:.1f} ms")
    print(f"new: best {best[1]:.1f} ms, median {median[1]:.1f} ms")
    print(f"new / old: best {best[1] / best[0]:.3f}, median {median[1] / median[0]:.3f}")


if __name__ == "__main__":
    main()
