"""Gradient synchronisation: its share of a training step, and the engine's all-reduce against raw mpi4py.

    python -m poprun_py --num-instances 2 --num-replicas 4 python bench/bench_allreduce.py
    python -m poprun_py --num-instances 2 --num-replicas 2 python bench/bench_allreduce.py --model efficientnet-b0

1. Runs ``--steps`` training steps of the engine on synthetic uint8 data and reports the share of
   step time spent in ``Engine.sync_gradients`` (one all-reduce of the flat buffer + the 1/N scale).
2. Times ``Engine.sync_gradients`` against the baseline, a raw ``MPI.COMM_WORLD.Allreduce(IN_PLACE,
   buf, SUM)`` of the same bytes, interleaved, ``--repeats`` times each after a barrier; prints both
   medians and the ratio (target: at most 1.05x).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import poprun_py as popdist
from ipu.runtime.engine import Engine
from ipu.runtime.replica import DeviceOps, SingleIpuReplica
from models import build_model
from models.optim.loss_scaling import LossScaleConfig, LossScaler
from models.optim import OptimConfig, make_optimizer
from models.optim.schedules import ScheduleConfig, make_schedule


def build_engine(args, comm, dist) -> Engine:
    model = build_model(args.model, 10, seed=0, resolution=args.resolution, in_channels=1, norm="group")
    local = dist.num_local_replicas
    reps = [SingleIpuReplica(model, dist.replica_index_offset + i, DeviceOps((100.0,), (50.0,)))
            for i in range(local)]
    opt = make_optimizer(OptimConfig(name="lars", momentum=0.9, weight_decay=1e-5), model.params())
    sched = make_schedule(ScheduleConfig(kind="constant", base_lr=0.1), 100, 10_000)
    engine = Engine(model, opt, sched, comm, reps, grad_accum=args.accum, total_replicas=dist.num_total_replicas,
                    scaler=LossScaler(LossScaleConfig(initial_scale=128.0)))
    engine.broadcast_initial_state()
    return engine


def step_share(engine: Engine, args, dist) -> tuple[float, float]:
    rng = np.random.default_rng(dist.instance_index)
    shape = (dist.num_local_replicas, args.accum, args.micro_batch, args.resolution, args.resolution, 1)
    images = rng.integers(0, 256, shape, dtype=np.uint8)
    labels = rng.integers(0, 10, shape[:3])
    engine.train_step(images, labels)  # compile and warm up
    total = sync = 0.0
    for _ in range(args.steps):
        start = time.perf_counter()
        m = engine.train_step(images, labels)
        total += time.perf_counter() - start
        sync += m.sync_s
    return sync / total, total / args.steps


def allreduce_vs_raw(engine: Engine, args) -> tuple[float, float]:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    raw = np.random.default_rng(world.Get_rank()).standard_normal(engine.flat.size).astype(engine.flat.dtype)
    ours_s, raw_s = [], []
    for _ in range(args.repeats):
        engine.flat[:] = raw
        world.Barrier()
        start = time.perf_counter()
        engine.sync_gradients()
        ours_s.append(time.perf_counter() - start)
        buf = raw.copy()
        world.Barrier()
        start = time.perf_counter()
        world.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        raw_s.append(time.perf_counter() - start)
    return statistics.median(ours_s), statistics.median(raw_s)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="efficientnet-tiny")
    p.add_argument("--resolution", type=int, default=28)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args()
    dist = popdist.init()
    comm = popdist.get_comm()
    if comm.size < 2:
        raise SystemExit("run under `python -m poprun_py --num-instances 2 ...`: one instance has nothing to reduce")
    engine = build_engine(args, comm, dist)
    share, step_s = step_share(engine, args, dist)
    ours, raw = allreduce_vs_raw(engine, args)
    share_all = comm.allgather(np.array([share]))[:, 0]
    if dist.instance_index == 0:
        mb = engine.flat.nbytes / 2**20
        print(f"model {args.model} @ {args.resolution}px: {engine.flat.size:,} parameters, gradient buffer {mb:.2f} MiB, "
              f"{comm.size} instances x {dist.num_local_replicas} replicas, micro-batch {args.micro_batch} x GA {args.accum}")
        print(f"step time {step_s * 1e3:.1f} ms; gradient sync share of step time per instance: "
              + ", ".join(f"{s:.2%}" for s in share_all))
        print(f"{'':34}{'median':>12}")
        print(f"{'engine sync_gradients':34}{ours * 1e6:>10.1f} us")
        print(f"{'raw mpi4py Allreduce (baseline)':34}{raw * 1e6:>10.1f} us")
        print(f"ratio engine / raw: {ours / raw:.3f}x (target <= 1.05x)")
        print(f"transfer alone (raw median / step time): {raw / step_s:.2%}; the in-step share above also holds "
              "the wait for the slowest instance")


if __name__ == "__main__":
    main()
