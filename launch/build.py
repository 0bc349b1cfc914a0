"""Turn a distributed ``TrainConfig`` into the objects of a run: data, model, optimizer, engine.

One function per object; :func:`build_training` wires them into a :class:`Training`. The
checkpoint state of a run (what :func:`capture_state` writes and :func:`restore_state` reads)
lives here too, next to the objects it describes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.augment import AugmentConfig
from data.dataset import Dataset, open_dataset
from data.loader import BatchSpec, Loader, evaluation_loader
from ipu.runtime.emulation import HalfRounder, PrecisionEmulation
from ipu.runtime.engine import Engine
from ipu.memory import IpuOutOfMemoryError, MemoryPlan, fit, raise_if_out_of_memory
from ipu.memory_report import format_memory_report, plot_memory_report
from ipu.plan import IpuPlan
from ipu.precision import get_precision
from ipu.runtime.replica import DeviceOps, PipelinedIpuReplica, SingleIpuReplica
from ipu.specs import PODS, get_chip
from ipu.io_tiles import IoTilePlan, plan_io_tiles
from launch.checkpoint import split_prefix
from launch.config import TrainConfig
from models import build_model
from models.optim.ema import ExponentialMovingAverage
from models.optim.loss_scaling import LossScaler
from models.optim import make_optimizer
from models.optim.schedules import Schedule, make_schedule

logger = logging.getLogger(__name__)


@dataclass
class Training:
    cfg: TrainConfig
    train_set: Dataset
    loader: Loader
    eval_loader: Loader | None
    model: Any
    schedule: Schedule
    engine: Engine
    total_steps: int
    instance_index: int
    num_instances: int
    compiled: CompiledIpu | None = None


@dataclass(frozen=True)
class CompiledIpu:
    """What the compile step decided: the plan and its memory fit (None with ``ipu.check_fit: false``)
    and the IO tiles."""

    plan: IpuPlan | None
    memory: MemoryPlan | None
    io: IoTilePlan


def ipu_plan(cfg: TrainConfig, image_shape: tuple[int, int, int], num_classes: int, dataset_images: int) -> IpuPlan:
    """The run's ``IpuPlan``: one replica of ``cfg`` on the POD (``ipu.system``, or the smallest that
    holds every replica's IPUs). Raises ``ValueError`` when no IPU-POD could run this shape."""
    ipu = cfg.ipu
    total_ipus = cfg.data.replicas * ipu.ipus_per_replica
    system = ipu.system or next((name for name, pod in sorted(PODS.items(), key=lambda kv: kv[1].num_ipus)
                                 if pod.num_ipus >= total_ipus), None)
    if system is None:
        raise ValueError(f"{total_ipus} IPUs ({cfg.data.replicas} replicas x {ipu.ipus_per_replica}) exceed the "
                         f"largest POD ({max(p.num_ipus for p in PODS.values())} IPUs)")
    options = cfg.model.kwargs
    size = int(options.pop("resolution", image_shape[0]))
    options.setdefault("in_channels", image_shape[2])
    recompute = ipu.recompute and ipu.ipus_per_replica > 1  # the CPU replica recomputes only when pipelined
    return IpuPlan(model=cfg.model.name, model_overrides=tuple(sorted(options.items())), image_size=size,
                   num_classes=num_classes, micro_batch=cfg.data.micro_batch,
                   gradient_accumulation=cfg.data.grad_accum, replicas=cfg.data.replicas,
                   ipus_per_replica=ipu.ipus_per_replica, pipeline_splits=tuple(ipu.pipeline_splits),
                   schedule=ipu.pipeline_schedule, precision=ipu.precision, recompute=recompute,
                   available_memory_proportion=ipu.available_memory_proportion, num_io_tiles=ipu.num_io_tiles,
                   prefetch_depth=ipu.prefetch_depth, eight_bit_io=True, optimizer=plan_optimizer(cfg.optim),
                   system=system, chip=ipu.chip, num_hosts=ipu.num_hosts, device_iterations=ipu.device_iterations,
                   dataset_images=dataset_images, epochs=cfg.run.epochs)


def plan_optimizer(optim) -> str:
    """The optimizer-state model (``ipu.plan.OPTIMIZER_STATE_SLOTS``) for a ``models`` optimizer."""
    if optim.name in ("sgd", "nesterov"):
        return "momentum" if optim.momentum > 0 else "sgd"
    return {"adamw": "adam"}.get(optim.name, optim.name)


def compile_ipu(cfg: TrainConfig, model, info, lead: bool) -> CompiledIpu:
    """The compile step, before any step and any collective: the same verdict on every instance.

    Places the run's replica on its IPUs (``ipu.memory.fit``), logs the memory report (and writes
    ``memory.png`` on instance 0 when ``run.plots``), plans the IO tiles, and raises
    ``IpuOutOfMemoryError`` in Poplar's words when a tile does not fit. With ``ipu.check_fit: false``
    only the IO tiles are planned and the log says why there is no fit check.
    """
    ipu = cfg.ipu
    if not ipu.check_fit:
        try:
            ipu_plan(cfg, info.image_shape, info.num_classes, info.num_samples)
            why = ""
        except ValueError as err:
            why = f" (and no IPU-POD could run this shape: {err})"
        logger.info("No memory fit check: ipu.check_fit is false%s.", why)
        h, w, c = info.image_shape
        io = plan_io_tiles(get_chip(ipu.chip), ipu.num_io_tiles, cfg.data.micro_batch * h * w * c,
                           ipu.prefetch_depth, ipu.ipus_per_replica, ipu.pipeline_schedule)
        _log_io_tiles(io, ipu.prefetch_depth)
        return CompiledIpu(None, None, io)
    try:
        plan = ipu_plan(cfg, info.image_shape, info.num_classes, info.num_samples)
    except ValueError as err:
        raise ValueError(f"cannot compile this run for an IPU-POD: {err}; change the shape, or pass "
                         "--set ipu.check_fit=false for a CPU-only experiment (no memory fit check)") from err
    memory = fit(plan, model.profile(cfg.data.micro_batch))
    logger.info("Memory per IPU (%s, %s on %s, micro-batch %d, precision %s):\n%s", plan.model, plan.chip,
                plan.system, plan.micro_batch, plan.precision, format_memory_report(memory))
    if lead and cfg.run.plots:
        run_dir = Path(cfg.run.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        logger.info("Memory plot: %s", plot_memory_report(memory, run_dir / "memory.png"))
    try:
        raise_if_out_of_memory(memory, plan)
    except IpuOutOfMemoryError as err:
        raise IpuOutOfMemoryError(f"{err}. Config fields: data.micro_batch, ipu.ipus_per_replica with "
                                  "ipu.pipeline_splits, ipu.recompute (pipelined replicas only), "
                                  "ipu.available_memory_proportion, ipu.precision, ipu.num_io_tiles, "
                                  "ipu.pipeline_schedule, ipu.chip") from None
    _log_io_tiles(memory.io, ipu.prefetch_depth)
    return CompiledIpu(plan, memory, memory.io)


def _log_io_tiles(io: IoTilePlan, prefetch_depth: int) -> None:
    if not io.num_io_tiles:
        logger.info("No IO tiles (ipu.num_io_tiles=0): host transfer does not overlap compute; each infeed "
                    "prefetches %d micro-batch(es).", prefetch_depth)
        return
    logger.info("IO tiles: %d per IPU (%d left for compute) hold %d prefetched micro-batch(es), %d of %d bytes; "
                "host transfer %s compute.", io.num_io_tiles, io.compute_tiles, prefetch_depth, io.io_bytes,
                io.io_budget_bytes, "overlaps" if io.overlap else "does NOT overlap")


def batch_spec(cfg: TrainConfig, micro_batch: int, num_instances: int, instance_index: int, grad_accum: int) -> BatchSpec:
    if cfg.data.replicas % num_instances:
        raise ValueError(f"{cfg.data.replicas} replicas cannot be split evenly over {num_instances} instances")
    return BatchSpec(micro_batch=micro_batch, grad_accum=grad_accum, local_replicas=cfg.data.replicas // num_instances,
                     num_instances=num_instances, instance_index=instance_index)


def build_loaders(cfg: TrainConfig, num_instances: int, instance_index: int) -> tuple[Dataset, Loader, Loader | None]:
    d = cfg.data
    train_set = open_dataset(d.path, "train")
    augment = AugmentConfig(scale=tuple(d.crop_scale), flip=d.flip) if d.augment else False
    loader = Loader(train_set, batch_spec(cfg, d.micro_batch, num_instances, instance_index, d.grad_accum),
                    seed=cfg.run.seed, augment=augment, prefetch=d.prefetch, cache=d.cache)
    eval_loader = None
    if cfg.run.evaluate:
        val_set = open_dataset(d.path, "validation")
        spec = batch_spec(cfg, d.eval_micro_batch or d.micro_batch, num_instances, instance_index, 1)
        eval_loader = evaluation_loader(val_set, spec, prefetch=d.prefetch, cache=d.cache)
    return train_set, loader, eval_loader


def build_net(cfg: TrainConfig, info) -> Any:
    """The model for the dataset's image shape and classes (options may override resolution)."""
    h, _, c = info.image_shape
    options = {"in_channels": c, "resolution": h, **cfg.model.kwargs}
    return build_model(cfg.model.name, info.num_classes, seed=cfg.run.seed, **options)


def emulates_half(cfg: TrainConfig) -> bool:
    """The run rounds its compute to float16: ``ipu.emulate_precision`` with 16.32 or 16.16."""
    return cfg.ipu.emulate_precision and get_precision(cfg.ipu.precision).half_compute


def build_replicas(cfg: TrainConfig, model, info, first_index: int, count: int) -> list:
    device = DeviceOps(mean=tuple(info.mean), std=tuple(info.std), seed=cfg.run.seed,
                       mixup_alpha=cfg.data.mixup_alpha, cutmix_lambda=cfg.data.cutmix_lambda,
                       label_smoothing=cfg.model.label_smoothing)
    ipu = cfg.ipu

    def half() -> HalfRounder | None:  # one rounding buffer per replica
        return HalfRounder() if emulates_half(cfg) else None

    if ipu.ipus_per_replica > 1:
        if not ipu.pipeline_splits:
            raise ValueError(f"ipu.ipus_per_replica={ipu.ipus_per_replica} needs ipu.pipeline_splits "
                             f"(block names from {model.blocks()[1:]})")
        return [PipelinedIpuReplica(model, first_index + i, device, ipu.pipeline_splits, ipu.pipeline_schedule,
                                    ipu.recompute, half=half()) for i in range(count)]
    return [SingleIpuReplica(model, first_index + i, device, half=half()) for i in range(count)]


def build_emulation(cfg: TrainConfig, params, optimizer) -> PrecisionEmulation | None:
    """The engine's float16 emulation, or None (float32 throughout: 32.32 or emulation off)."""
    if not emulates_half(cfg):
        return None
    logger.info("Emulating precision %s: input, weights and gradient partials rounded to float16%s.",
                cfg.ipu.precision, "; weights and optimizer state stored in float16 (weight updates "
                + ("stochastically rounded)" if cfg.ipu.stochastic_rounding else "rounded to nearest)")
                if get_precision(cfg.ipu.precision).weight_bytes == 2 else "; float32 master weights")
    return PrecisionEmulation(cfg.ipu.precision, params, optimizer, seed=cfg.run.seed,
                              stochastic_rounding=cfg.ipu.stochastic_rounding)


def total_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    steps = int(cfg.run.epochs * steps_per_epoch)
    if cfg.run.max_steps:
        steps = min(steps, cfg.run.max_steps) if steps else cfg.run.max_steps
    return max(steps, 1)


def build_training(cfg: TrainConfig, comm, instance_index: int, num_instances: int) -> Training:
    train_set, loader, eval_loader = build_loaders(cfg, num_instances, instance_index)
    model = build_net(cfg, train_set.info)
    compiled = compile_ipu(cfg, model, train_set.info, lead=instance_index == 0)
    params = model.params()
    optimizer = make_optimizer(cfg.optim, params)
    steps = total_steps(cfg, loader.steps_per_epoch)
    schedule = make_schedule(cfg.schedule.resolve(cfg.global_batch), loader.steps_per_epoch, steps)
    local = loader.spec.local_replicas
    replicas = build_replicas(cfg, model, train_set.info, instance_index * local, local)
    engine = Engine(model, optimizer, schedule, comm, replicas, grad_accum=cfg.data.grad_accum,
                    total_replicas=cfg.data.replicas, scaler=LossScaler(cfg.loss_scaling),
                    ema_every_step=cfg.ema.every == "step", checksum_every=cfg.run.checksum_every,
                    grad_dtype=np.dtype(cfg.run.gradient_dtype), prefetch_depth=cfg.ipu.prefetch_depth,
                    emulation=build_emulation(cfg, params, optimizer))
    engine.broadcast_initial_state()
    if cfg.ema.decay > 0.0:  # the average starts from the broadcast weights
        engine.ema = ExponentialMovingAverage(params, cfg.ema.decay, dtype=np.float64 if cfg.ema.float64 else None,
                                              use_num_updates=cfg.ema.use_num_updates)
    return Training(cfg, train_set, loader, eval_loader, model, schedule, engine, steps, instance_index, num_instances,
                    compiled)


# -- checkpoint state ------------------------------------------------------------------------
def capture_state(t: Training, extra: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Everything needed to continue exactly. Collective (gathers replica states): call everywhere."""
    e = t.engine
    arrays: dict[str, np.ndarray] = {f"model/{p.name}": p.data for p in e.params}
    meta: dict[str, Any] = {"config": t.cfg.to_dict(), "engine_step": e.step, "loader": t.loader.state(),
                            "loss_scaler": e.scaler.state_dict(), "seed": t.cfg.run.seed,
                            "rng": "stateless: every stream is a function of (seed, step, replica, micro-batch)",
                            "total_replicas": e.total_replicas, **extra}
    for key, value in e.optimizer.state_dict().items():
        if isinstance(value, np.ndarray):
            arrays[f"optim/{key}"] = value
        else:
            meta.setdefault("optim_scalars", {})[key] = value
    if e.ema is not None:
        for key, value in e.ema.state_dict().items():
            if isinstance(value, np.ndarray):
                arrays[f"ema/{key}"] = value
            else:
                meta.setdefault("ema_scalars", {})[key] = value
    states = e.gather_replica_states()
    for r, state in enumerate(states or []):
        for key, value in state.items():
            arrays[f"replica/{r}/{key}"] = value
    return arrays, meta


def restore_state(t: Training, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Load a checkpoint written by :func:`capture_state` (any instance split of the same replicas)."""
    e = t.engine
    if meta["total_replicas"] != e.total_replicas:
        raise ValueError(f"the checkpoint was written with {meta['total_replicas']} replicas, this run has "
                         f"{e.total_replicas}: the per-replica state and the global batch would not match")
    weights = split_prefix(arrays, "model")
    names = {p.name for p in e.params}
    if set(weights) != names:
        raise ValueError(f"checkpoint weights {sorted(set(weights) ^ names)[:5]} do not match the model")
    for p in e.params:
        np.copyto(p.data, weights[p.name])
    e.optimizer.load_state_dict({**split_prefix(arrays, "optim"), **meta.get("optim_scalars", {})})
    if e.ema is not None:
        e.ema.load_state_dict({**split_prefix(arrays, "ema"), **meta.get("ema_scalars", {})})
    e.scaler.load_state_dict(meta["loss_scaler"])
    for replica in e.replicas:
        state = split_prefix(arrays, f"replica/{replica.index}")
        if state:
            replica.load_state_dict(state)
    e.step = int(meta["engine_step"])
    t.loader.load_state(meta["loader"])
