"""Turn a distributed ``TrainConfig`` into the objects of a run: data, model, optimizer, engine.

One function per object; :func:`build_training` wires them into a :class:`Training`, after the
compile step (``launch.compile``). What a checkpoint holds of a run is ``launch.checkpoint``'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from data.augment import AugmentConfig
from data.dataset import Dataset, open_dataset
from data.loader import BatchSpec, Loader, evaluation_loader
from data.sources import dataset_path
from ipu.precision import get_precision
from ipu.runtime.emulation import HalfRounder, PrecisionEmulation
from ipu.runtime.engine import Engine
from ipu.runtime.replica import DeviceOps, PipelinedIpuReplica, SingleIpuReplica
from ipu.runtime.streams import host_batches_ahead
from launch.compile import CompiledIpu, compile_ipu
from launch.config import TrainConfig
from launch.preemption import STOP_SIGNALS
from models import build_model
from models.optim import make_optimizer
from models.optim.ema import ExponentialMovingAverage
from models.optim.loss_scaling import LossScaler
from models.optim.schedules import Schedule, make_schedule
from poprun_py.topology import InstanceInfo

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
    placement: InstanceInfo  # this instance's replicas, from the launcher (launch.config.placement)
    compiled: CompiledIpu | None = None
    run_id: str = ""  # the run this instance takes part in (launch.run_dir), recorded in each checkpoint
    saved_step: int = -1  # the update of this run's newest checkpoint (written or resumed from); -1: none

    @property
    def instance_index(self) -> int:
        return self.placement.index

    @property
    def lead(self) -> bool:
        """Instance 0: it writes the metrics, checkpoints and plots and shows the progress bar."""
        return self.placement.index == 0


def batch_spec(placement: InstanceInfo, micro_batch: int, grad_accum: int) -> BatchSpec:
    """This instance's share of every global batch: its replicas from the launcher's placement."""
    return BatchSpec(micro_batch=micro_batch, grad_accum=grad_accum, local_replicas=placement.num_local_replicas,
                     num_instances=placement.num_instances, instance_index=placement.index)


def build_loaders(cfg: TrainConfig, placement: InstanceInfo) -> tuple[Dataset, Loader, Loader | None]:
    d = replace(cfg.data, path=dataset_path(cfg.data.path))
    if placement.num_total_replicas != d.replicas:
        raise ValueError(f"the placement runs {placement.num_total_replicas} replicas but data.replicas is "
                         f"{d.replicas}: build the placement with launch.config.placement(distribute(cfg, dist), dist)")
    train_set = open_dataset(d.path, "train")
    augment = AugmentConfig(scale=tuple(d.crop_scale), flip=d.flip) if d.augment else False
    loader = Loader(train_set, batch_spec(placement, d.micro_batch, d.grad_accum), seed=cfg.run.seed,
                    augment=augment, prefetch=host_batches_ahead(cfg.ipu.prefetch_depth, d.grad_accum), cache=d.cache)
    eval_loader = None
    if cfg.run.evaluate:
        val_set = open_dataset(d.path, "validation")
        spec = batch_spec(placement, d.eval_micro_batch or d.micro_batch, 1)
        eval_loader = evaluation_loader(val_set, spec, prefetch=cfg.ipu.prefetch_depth, cache=d.cache)
    return train_set, loader, eval_loader


def build_net(cfg: TrainConfig, info) -> Any:
    """The model for the dataset's image shape and classes (options may override resolution)."""
    h, _, c = info.image_shape
    options = {"in_channels": c, "resolution": h, **cfg.model.kwargs}
    return build_model(cfg.model.name, info.num_classes, seed=cfg.run.seed, **options)


def emulates_half(cfg: TrainConfig) -> bool:
    """The run rounds its compute to float16: ``ipu.emulate_precision`` with 16.32 or 16.16."""
    return cfg.ipu.emulate_precision and get_precision(cfg.ipu.precision).half_compute


def build_replicas(cfg: TrainConfig, model, info, replicas: range) -> list:
    """This instance's replicas (global indices ``replicas``: the placement's)."""
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
        return [PipelinedIpuReplica(model, r, device, ipu.pipeline_splits, ipu.pipeline_schedule,
                                    ipu.recompute, half=half()) for r in replicas]
    return [SingleIpuReplica(model, r, device, half=half()) for r in replicas]


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


def schedule_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The run's length in weight updates, ``run.epochs`` of them: what the learning-rate schedule spans."""
    return max(int(cfg.run.epochs * steps_per_epoch), 1)


def total_steps(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The update this run stops after: the schedule's end, or ``run.max_steps`` if that comes first
    (a stop, which leaves the schedule as ``run.epochs`` define it)."""
    steps = schedule_steps(cfg, steps_per_epoch)
    return min(steps, cfg.run.max_steps) if cfg.run.max_steps else steps


def build_training(cfg: TrainConfig, comm, placement: InstanceInfo) -> Training:
    """Every object of a run on this instance, from the config and the instance's placement."""
    train_set, loader, eval_loader = build_loaders(cfg, placement)
    model = build_net(cfg, train_set.info)
    compiled = compile_ipu(cfg, model, train_set.info, lead=placement.index == 0)
    params = model.params()
    optimizer = make_optimizer(cfg.optim, params)
    steps = total_steps(cfg, loader.steps_per_epoch)
    schedule = make_schedule(cfg.schedule.resolve(cfg.global_batch), loader.steps_per_epoch,
                             schedule_steps(cfg, loader.steps_per_epoch))
    replicas = build_replicas(cfg, model, train_set.info, placement.replicas)
    engine = Engine(model, optimizer, schedule, comm, replicas, grad_accum=cfg.data.grad_accum,
                    total_replicas=placement.num_total_replicas, scaler=LossScaler(cfg.loss_scaling),
                    ema_every_step=cfg.ema.every == "step", checksum_every=cfg.run.checksum_every,
                    grad_dtype=np.dtype(cfg.run.gradient_dtype),
                    emulation=build_emulation(cfg, params, optimizer), num_flags=len(STOP_SIGNALS))
    engine.broadcast_initial_state()
    if cfg.ema.decay > 0.0:  # the average starts from the broadcast weights
        engine.ema = ExponentialMovingAverage(params, cfg.ema.decay, dtype=np.float64 if cfg.ema.float64 else None,
                                              use_num_updates=cfg.ema.use_num_updates)
    return Training(cfg, train_set, loader, eval_loader, model, schedule, engine, steps, placement, compiled)
