"""Turn a distributed ``TrainConfig`` into the objects of a run: data, model, IPU plan, optimizer, engine.

One function per object; :func:`build_training` wires them into a :class:`Training`, after the
compile step (:func:`compile_ipu`: the run's ``IpuPlan`` from the config, ``launch.train.plan.ipu_plan``,
compiled by ``ipu.compile.compile_device`` before any step and any collective, so that every instance
reaches the same verdict). ``model.onnx`` is read once (:func:`open_model_file`, ``models.onnx.OnnxFile``)
and the file object passed on: to the graph model and, at the end, to ``models.onnx.export``. What a
checkpoint holds of a run is ``launch.train.checkpoint``'s.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from data.augment import AugmentConfig
from data.dataset import Dataset, open_dataset
from data.loader import BatchSpec, Loader, evaluation_loader, host_batches_ahead
from data.sources import dataset_path
from data.split import Subset, open_split
from ipu.compile import CompiledIpu, compile_device
from ipu.io_tiles import IoTilePlan, plan_io_tiles
from ipu.precision import get_precision
from ipu.runtime.emulation import PrecisionEmulation
from ipu.runtime.engine import Engine
from ipu.runtime.replica import DeviceOps, make_replicas
from ipu.specs import get_chip
from launch.train.config import TrainConfig
from launch.train.plan import graph_workload, ipu_plan
from launch.train.preemption import STOP_SIGNALS
from models import build_model
from models.onnx import OnnxFile, folded_norm_warning, training_graph
from models.optim import make_optimizer
from models.optim.ema import ExponentialMovingAverage
from models.optim.loss_scaling import LossScaler
from models.optim.schedules import Schedule, make_schedule
from poprun_py.env import INSTANCE_INDEX
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
    placement: InstanceInfo  # this instance's replicas, from the launcher (launch.train.distribute.placement)
    compiled: CompiledIpu | None = None
    run_id: str = ""  # the run this instance takes part in (launch.train.run_dir), recorded in each checkpoint
    saved_step: int = -1  # the update of this run's newest checkpoint (written or resumed from); -1: none
    test_loader: Loader | None = None  # run.evaluate_test: the test split, evaluated once at the end
    cpu_before: float = 0.0  # CPU seconds (all instances) of the earlier parts of a resumed run, from its checkpoint
    cpu_origin: float = field(default_factory=time.process_time)  # this process's CPU clock when this part began
    model_file: OnnxFile | None = None  # model.onnx as the run read it (open_model_file): the export starts from it

    @property
    def model_label(self) -> str:
        """The trained model's name in the log and ``summary.json`` (``config_model``): ``model.name``, or for
        ``model.onnx`` the file's label (``onnx:<file name>``, ``models.onnx.OnnxFile.label``)."""
        return self.model_file.label if self.model_file is not None else self.cfg.model.name

    @property
    def instance_index(self) -> int:
        return self.placement.index

    @property
    def lead(self) -> bool:
        """Instance 0: it writes the metrics, checkpoints and plots and shows the progress bar."""
        return self.placement.index == 0


def build_loaders(cfg: TrainConfig, placement: InstanceInfo) -> tuple[Dataset | Subset, Loader, Loader | None, Loader | None]:
    """The training loader, the validation loader (``run.evaluate``) and the test loader (``run.evaluate_test``):
    the splits of ``data.split.open_split``, carved from the training images when ``data.validation_fraction`` > 0."""
    d = replace(cfg.data, path=dataset_path(cfg.data.path))
    if placement.num_total_replicas != d.replicas:
        raise ValueError(f"the placement runs {placement.num_total_replicas} replicas but data.replicas is "
                         f"{d.replicas}: build the placement with launch.train.distribute.placement(distribute(cfg, dist), dist)")
    if cfg.run.evaluate_test and not d.validation_fraction:
        raise ValueError("run.evaluate_test=true needs data.validation_fraction > 0: without a validation split carved from "
                         "the training images the file's held-out split is the validation split, not a test split")
    train_set = open_split(d.path, "train", d.validation_fraction, d.split_seed)
    augment = AugmentConfig(scale=tuple(d.crop_scale), flip=d.flip) if d.augment else False
    loader = Loader(train_set, BatchSpec.of_placement(placement, d.micro_batch, d.grad_accum), seed=cfg.run.seed,
                    augment=augment, prefetch_batches=host_batches_ahead(cfg.ipu.prefetch_micro_batches, d.grad_accum), cache=d.cache)
    spec = BatchSpec.of_placement(placement, d.eval_micro_batch or d.micro_batch)
    held_out = []
    for split, wanted in (("validation", cfg.run.evaluate), ("test", cfg.run.evaluate_test)):
        held_out.append(evaluation_loader(open_split(d.path, split, d.validation_fraction, d.split_seed), spec,
                                          prefetch_batches=cfg.ipu.prefetch_micro_batches, cache=d.cache) if wanted else None)
    return train_set, loader, held_out[0], held_out[1]


def open_model_file(cfg: TrainConfig) -> OnnxFile | None:
    """``model.onnx``, read once for the whole run and checked against the dataset before anything is written
    (the run directory included): the file is there, the graph loads (every op supported), its input and
    classifier fit the dataset's images and classes. None for a built-in model (``build_model`` takes the
    dataset's shape). The graph is made here, and :func:`build_net` takes it from the file."""
    if not cfg.model.onnx:
        return None
    shown = f"model.onnx={cfg.model.onnx}"
    file = OnnxFile(cfg.model.onnx, shown)
    graph = _graph(cfg, file, dataset_info(cfg))
    warning = folded_norm_warning(graph, shown, "it trains without normalisation")
    if warning and int(os.environ.get(INSTANCE_INDEX, "0") or 0) == 0:  # once per job
        logger.warning(warning)
    return file


def dataset_info(cfg: TrainConfig):
    """The training split's ``DatasetInfo`` (image shape, classes, images) of ``data.path``."""
    train_set = open_dataset(dataset_path(cfg.data.path), "train")
    try:
        return train_set.info
    finally:
        train_set.close()


def _graph(cfg: TrainConfig, file: OnnxFile, info):
    return training_graph(file, info.image_shape, info.num_classes, cfg.data.micro_batch, cfg.model.num_classes,
                          cfg.data.path)


def build_net(cfg: TrainConfig, info, model_file: OnnxFile | None = None) -> Any:
    """The model for the dataset's image shape and classes (options may override resolution); with
    ``model.onnx``, the graph model of ``model_file`` (:func:`open_model_file`'s; read here when not given)."""
    h, w, c = info.image_shape
    if cfg.model.onnx:
        from models.onnx.network import graph_model

        file = model_file or open_model_file(cfg)
        return graph_model(_graph(cfg, file, info), seed=cfg.run.seed, num_classes=cfg.model.num_classes,
                           splits=cfg.ipu.pipeline_splits, shown=file.shown)
    options = {"in_channels": c, "resolution": h, **cfg.model.kwargs}
    return build_model(cfg.model.name, info.num_classes, seed=cfg.run.seed, **options)


# what a run that does not fit can change, after Poplar's words
OOM_FIELDS = ("Config fields: data.micro_batch, ipu.ipus_per_replica with ipu.pipeline_splits, ipu.recompute "
              "(pipelined replicas only), ipu.available_memory_proportion, ipu.precision, ipu.num_io_tiles, "
              "ipu.pipeline_schedule, ipu.chip")


def compile_ipu(cfg: TrainConfig, model, info, lead: bool) -> CompiledIpu:
    """The compile step, before any step and any collective: the same verdict on every instance.

    Places the run's replica on its IPUs (``ipu.compile.compile_device``), logs the memory report (and writes
    ``memory.png`` on instance 0 when ``run.plots``), plans the IO tiles, and raises
    ``IpuOutOfMemoryError`` in Poplar's words when a tile does not fit. With ``ipu.check_fit: false``
    only the plan (when an IPU-POD can run it) and the IO tiles, and the log says why there is no fit check.
    The run's POD prediction (``launch.train.loop``) is this plan's.
    """
    ipu = cfg.ipu
    workload = graph_workload(model.graph) if cfg.model.onnx else None
    if not ipu.check_fit:
        plan = None
        try:
            plan = ipu_plan(cfg, info.image_shape, info.num_classes, info.num_samples, workload)
            why = ""
        except ValueError as err:
            why = f" (and no IPU-POD could run this shape: {err})"
        logger.info("No memory fit check: ipu.check_fit is false%s.", why)
        h, w, c = info.image_shape
        io = plan_io_tiles(get_chip(ipu.chip), ipu.num_io_tiles, cfg.data.micro_batch * h * w * c,
                           ipu.prefetch_micro_batches, ipu.ipus_per_replica, ipu.pipeline_schedule)
        _log_io_tiles(io, ipu.prefetch_micro_batches)
        return CompiledIpu(plan, None, io)
    try:
        plan = ipu_plan(cfg, info.image_shape, info.num_classes, info.num_samples, workload)
    except ValueError as err:
        raise ValueError(f"cannot compile this run for an IPU-POD: {err}; change the shape, or pass "
                         "--set ipu.check_fit=false for a CPU-only experiment (no memory fit check)") from err
    plot_path = None
    if lead and cfg.run.plots:
        run_dir = Path(cfg.run.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        plot_path = run_dir / "memory.png"
    compiled = compile_device(plan, model.profile(cfg.data.micro_batch), plot_path=plot_path, fields=OOM_FIELDS)
    _log_io_tiles(compiled.io, ipu.prefetch_micro_batches)
    return compiled


def _log_io_tiles(io: IoTilePlan, prefetch_micro_batches: int) -> None:
    if not io.num_io_tiles:
        here = (f"the loader's thread keeps {prefetch_micro_batches} micro-batch(es) per replica ready (ipu.prefetch_micro_batches)"
                if prefetch_micro_batches else "the training thread builds each batch when it needs it (ipu.prefetch_micro_batches=0)")
        logger.info("No IO tiles (ipu.num_io_tiles=0): host transfer does not overlap compute on an IPU; here %s.", here)
        return
    logger.info("IO tiles: %d per IPU (%d left for compute) hold %d prefetched micro-batch(es), %d of %d bytes; "
                "host transfer %s compute.", io.num_io_tiles, io.compute_tiles, prefetch_micro_batches, io.io_bytes,
                io.io_budget_bytes, "overlaps" if io.overlap else "does NOT overlap")


def emulates_half(cfg: TrainConfig) -> bool:
    """The run rounds its compute to float16: ``ipu.emulate_precision`` with 16.32 or 16.16."""
    return cfg.ipu.emulate_precision and get_precision(cfg.ipu.precision).half_compute


def build_replicas(cfg: TrainConfig, model, info, replicas: range) -> list:
    """This instance's replicas (global indices ``replicas``: the placement's)."""
    device = DeviceOps(mean=tuple(info.mean), std=tuple(info.std), seed=cfg.run.seed,
                       mixup_alpha=cfg.data.mixup_alpha, cutmix_lambda=cfg.data.cutmix_lambda,
                       label_smoothing=cfg.model.label_smoothing)
    ipu = cfg.ipu
    if ipu.ipus_per_replica > 1 and not ipu.pipeline_splits:
        raise ValueError(f"ipu.ipus_per_replica={ipu.ipus_per_replica} needs ipu.pipeline_splits "
                         f"(block names from {model.blocks()[1:]})")
    splits = ipu.pipeline_splits if ipu.ipus_per_replica > 1 else ()
    return make_replicas(model, device, replicas, splits, ipu.pipeline_schedule, ipu.recompute,
                         half=emulates_half(cfg))


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


def build_training(cfg: TrainConfig, comm, placement: InstanceInfo, model_file: OnnxFile | None = None) -> Training:
    """Every object of a run on this instance, from the config and the instance's placement; ``model_file``:
    ``model.onnx`` as :func:`open_model_file` read it (read here when not given)."""
    train_set, loader, eval_loader, test_loader = build_loaders(cfg, placement)
    if cfg.model.onnx and model_file is None:
        model_file = open_model_file(cfg)
    model = build_net(cfg, train_set.info, model_file)
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
    if cfg.run.update_stats_every:
        from models.optim.probe import UpdateProbe

        engine.probe = UpdateProbe(params, cfg.run.update_stats_every, lars_eta=getattr(optimizer, "lars_eta", 0.0),
                                   weight_decay=cfg.optim.weight_decay, eps=cfg.optim.lars_epsilon)
    return Training(cfg, train_set, loader, eval_loader, model, schedule, engine, steps, placement, compiled,
                    test_loader=test_loader, model_file=model_file)


def save_trained_onnx(t: Training) -> None:
    """With ``model.onnx``: ``run_dir/model.onnx``, the graph with the trained weights (``models.onnx.export``)."""
    if t.model_file is not None:
        from models.onnx.export import write_trained_onnx

        first = t.engine.replicas[0]  # global replica 0 (instance 0): its batch-norm statistics
        assert first.index == 0, "run_dir/model.onnx is written by the instance of replica 0"
        write_trained_onnx(t.model, t.model_file, t.cfg.run.run_dir, first.state_dict(), t.cfg.model.num_classes)
