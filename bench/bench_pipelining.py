"""CPU cost of emulating a pipeline: the pipelining API's program against the same model unpipelined.

    python bench/bench_pipelining.py                  # the README example's model, 30 updates each
    python bench/bench_pipelining.py --steps 100 --schedule interleaved

Baseline: ``loops.repeat`` over the same stages on one IPU (``SingleIpuReplica``), measured in the
same run on the same data; both give bitwise the same losses (checked here too). The pipelined
program runs the schedule's order with FIFOs; on a CPU each layer keeps one micro-batch's
activations, so a stage whose next forward overwrote them recomputes before its backward (an IPU
stashes per micro-batch instead): the ratio shows what that costs. Prints seconds per weight update
(median of the timed host calls, the first call skipped for compilation), the ratio, and the
predicted bubble share of the pipeline on a real IPU for comparison.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from ipu.runtime.loops import IPUInfeedQueue, IPUOutfeedQueue, repeat
from ipu.runtime.pipelining import OptimizerFunctionOutput, OptimizerSpec, pipeline
from ipu.runtime.stages import cross_entropy, dense, dropout, flatten

DATA = Path(__file__).resolve().parents[1] / "data" / "fashion-mnist-subset.h5"


def stage1(images):
    return dropout(dense(flatten(images), 256, activation="relu"), 0.1)


def stage2(x):
    return dense(dense(x, 64, activation="relu"), 10)


def optimizer_function(logits, labels):
    return OptimizerFunctionOutput(OptimizerSpec(learning_rate=0.02), cross_entropy(logits, labels))


def timed(program, outfeed, calls: int) -> tuple[float, list[float]]:
    """Median seconds per weight update over ``calls`` host calls after one warm-up call; the losses."""
    program.run()
    per_update = []
    for _ in range(calls):
        start = time.perf_counter()
        program.run()
        per_update.append((time.perf_counter() - start) / program.repeat_count)
    return statistics.median(per_update), list(outfeed.dequeue()["loss"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="timed weight updates per program")
    p.add_argument("--accumulation", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--schedule", default="grouped", choices=["grouped", "interleaved", "sequential"])
    p.add_argument("--recompute", action="store_true")
    args = p.parse_args()
    calls, per_call = max(1, args.steps // 5), 5

    base_out = IPUOutfeedQueue()
    base = repeat(per_call, [stage1, stage2], IPUInfeedQueue(DATA, args.batch_size), base_out, optimizer_function,
                  gradient_accumulation_count=args.accumulation)
    base_s, base_losses = timed(base, base_out, calls)
    pipe_out = IPUOutfeedQueue()
    pipe = pipeline([stage1, stage2], gradient_accumulation_count=args.accumulation, repeat_count=per_call,
                    infeed_queue=IPUInfeedQueue(DATA, args.batch_size), outfeed_queue=pipe_out,
                    optimizer_function=optimizer_function, pipeline_schedule=args.schedule, recompute=args.recompute)
    pipe_s, pipe_losses = timed(pipe, pipe_out, calls)

    threads = {k: os.environ.get(k, "unset") for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"threads {threads}")
    print(f"model 784-256-64-10 with dropout, micro-batch {args.batch_size}, accumulation {args.accumulation}, "
          f"{calls * per_call} timed updates each")
    print(f"unpipelined (loops.repeat, 1 IPU)   {base_s * 1e3:8.2f} ms/update   (baseline)")
    print(f"pipelined ({args.schedule}, 2 IPUs{', recompute' if args.recompute else ''})"
          f" {pipe_s * 1e3:8.2f} ms/update   ratio {pipe_s / base_s:.2f}x")
    print(f"same losses: {pipe_losses == base_losses}; predicted bubble on a real IPU: {pipe.bubble_share():.1%}")


if __name__ == "__main__":
    main()
