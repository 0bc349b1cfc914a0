"""A compiled training program on simulated IPUs: what ``pipeline(...)`` and ``loops.repeat(...)`` return.

Compiling (:func:`compile_program`) does, once and on every instance alike:

1. trace the stages into a ``models.Model`` with one block per stage (``ipu.runtime.stages``) and
   trace ``optimizer_function`` into the loss and the optimizer;
2. place the replica on its IPUs: the stages on the IPUs ``device_mapping`` names, the memory fit
   per IPU (``ipu.compile.compile_device``; a program that does not fit raises ``IpuOutOfMemoryError`` before
   any step), the schedule of one weight update (``ipu.pipeline.schedule``);
3. build this instance's replicas and the data-parallel engine, the same ones ``launch.train``
   runs EfficientNet with: ``PipelinedIpuReplica`` (stages with activation FIFOs, the schedule's
   order, recomputation) for two or more stages, ``SingleIpuReplica`` for one, and ``Engine``
   (one all-reduce, one optimizer step); the replicas and the topology come from PopDist
   (``poprun_py``), so ``poprun_py --num-replicas R --ipus-per-replica P`` scales it out.

:meth:`Program.run` is one host call: ``repeat_count`` weight updates, each reading
``gradient_accumulation_count`` micro-batches per replica from the infeed, the metrics of every
update handed to the outfeed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import poprun_py as popdist
from data.dataset import open_dataset
from data.loader import BatchSpec, evaluation_loader
from ipu.compile import compile_device, format_memory_report
from ipu.cost.prediction import predict
from ipu.memory import MemoryPlan
from ipu.pipeline.schedule import SCHEDULES, OpSchedule, check_device_mapping
from ipu.pipeline.split import check_gradient_accumulation, replica_schedule
from ipu.pipeline.timeline import bubble_share, format_sequence, plot_timeline
from ipu.plan import IpuPlan, optimizer_state
from ipu.runtime.engine import Engine, StepMetrics
from ipu.runtime.replica import DeviceOps, make_replicas
from ipu.runtime.stages import Loss, StageLike, trace_loss, trace_stages
from models.optim import OptimConfig, make_optimizer
from models.optim.loss_scaling import LossScaleConfig, LossScaler
from models.optim.schedules import ScheduleConfig, make_schedule
from poprun_py.systems import smallest_system_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizerSpec:
    """The ``opt`` of :class:`OptimizerFunctionOutput`: a ``models.optim`` rule at a constant learning rate."""

    learning_rate: float
    config: OptimConfig = field(default_factory=lambda: OptimConfig(name="sgd", momentum=0.0))

    def __post_init__(self) -> None:
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"OptimizerSpec: learning_rate must be a finite number > 0, got {self.learning_rate!r}")
        if not isinstance(self.config, OptimConfig):
            raise TypeError(f"OptimizerSpec: config must be a models.optim.OptimConfig, "
                            f"got {type(self.config).__name__}")


class OptimizerFunctionOutput:
    """What ``optimizer_function(logits, labels)`` returns: the optimizer and the loss to minimise."""

    def __init__(self, opt: OptimizerSpec, loss: Loss) -> None:
        if not isinstance(opt, OptimizerSpec):
            raise TypeError(f"OptimizerFunctionOutput.opt must be an OptimizerSpec(learning_rate, OptimConfig(...)), "
                            f"got {type(opt).__name__}")
        if not isinstance(loss, Loss):
            raise TypeError(f"OptimizerFunctionOutput.loss must be a Loss such as cross_entropy(logits, labels), "
                            f"got {type(loss).__name__}")
        self.opt, self.loss = opt, loss


@dataclass(frozen=True)
class ProgramConfig:
    """Everything compiling needs besides the functions and the queues; ``names`` spell the
    caller's argument names in error messages (accumulation count, stages)."""

    gradient_accumulation: int = 1
    pipelined: bool = True  # False: every stage on one IPU, run as one model (no pipeline)
    device_mapping: tuple[int, ...] = ()  # () = stage s on IPU s
    schedule: str = "grouped"
    recompute: bool = False
    repeat_count: int = 1
    seed: int = 0
    available_memory_proportion: float = 0.6
    chip: str = "mk2"
    name: str = "pipeline"
    names: tuple[str, str] = ("gradient_accumulation_count", "computational_stages")

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown pipeline schedule {self.schedule!r}: choose one of {', '.join(SCHEDULES)}")
        for name in ("gradient_accumulation", "repeat_count"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                shown = self.names[0] if name == "gradient_accumulation" else name
                raise ValueError(f"{shown} must be an integer >= 1, got {value!r}")


def compile_program(stages: Sequence[StageLike], optimizer_function: Callable, infeed_queue, outfeed_queue,
                    cfg: ProgramConfig) -> Program:
    """Trace, place, fit and build (module docstring); raises before any step when something is wrong."""
    if infeed_queue is None or not hasattr(infeed_queue, "bind"):
        raise ValueError("a training program needs infeed_queue=IPUInfeedQueue(dataset, batch_size=...) "
                         "(ipu.runtime.loops)")
    if optimizer_function is None:
        raise ValueError("a training program needs optimizer_function=lambda logits, labels: "
                         "OptimizerFunctionOutput(OptimizerSpec(learning_rate), cross_entropy(logits, labels))")
    info = infeed_queue.dataset.info
    traced = trace_stages(stages, info.image_shape, seed=cfg.seed, name=cfg.name)
    out = trace_loss(optimizer_function, traced.output_shape)
    if not isinstance(out, OptimizerFunctionOutput):
        raise TypeError(f"optimizer_function must return OptimizerFunctionOutput(opt, loss), got {type(out).__name__}")
    num_stages = len(traced.block_names) if cfg.pipelined else 1
    mapping = check_device_mapping(cfg.device_mapping or range(num_stages), num_stages, cfg.schedule)
    check_gradient_accumulation(cfg.gradient_accumulation, num_stages, names=cfg.names)
    dist = popdist.init()
    ipus = _ipus_per_replica(dist, 1 + max(mapping))
    plan = _ipu_plan(traced, info, infeed_queue.batch_size, cfg, mapping, ipus, dist, out.opt.config)
    profile = traced.model.profile(plan.micro_batch)
    memory = compile_device(plan, profile).memory
    device = DeviceOps(mean=tuple(info.mean), std=tuple(info.std), seed=cfg.seed, loss_fn=out.loss.fn)
    model = traced.model
    splits = traced.block_names[1:] if num_stages > 1 else ()
    replicas = make_replicas(model, device, dist.placement.replicas, splits, plan.schedule, cfg.recompute,
                             device_mapping=mapping)
    infeed_queue.bind(BatchSpec.of_placement(dist.placement, infeed_queue.batch_size, cfg.gradient_accumulation),
                      seed=cfg.seed)
    lr = make_schedule(ScheduleConfig(kind="constant", base_lr=out.opt.learning_rate), 1, 1)
    engine = Engine(model, make_optimizer(out.opt.config, model.params()), lr, popdist.get_comm(), replicas,
                    grad_accum=cfg.gradient_accumulation, total_replicas=dist.num_total_replicas,
                    scaler=LossScaler(LossScaleConfig(kind="static", initial_scale=1.0)))
    engine.broadcast_initial_state()
    schedule = replica_schedule(plan.schedule, num_stages, cfg.gradient_accumulation, plan.recompute, mapping)
    logger.info("Compiled %d stage(s) on %d IPU(s) per replica, %d replica(s).", num_stages, ipus,
                dist.num_total_replicas)
    return Program(model, engine, plan, memory, schedule, profile, infeed_queue, outfeed_queue, cfg.repeat_count)


def _ipus_per_replica(dist, needed: int) -> int:
    """Under poprun_py: its ``--ipus-per-replica``, which must hold the mapping; alone: the power of two that does."""
    if not dist.is_set:
        return 1 << (needed - 1).bit_length()
    if dist.ipus_per_replica < needed:
        raise ValueError(f"the stages are mapped onto {needed} IPUs but each replica has {dist.ipus_per_replica}: "
                         f"run under poprun_py --ipus-per-replica {1 << (needed - 1).bit_length()}, or map the "
                         f"stages onto fewer IPUs with device_mapping")
    return dist.ipus_per_replica


def _ipu_plan(traced, info, micro_batch: int, cfg: ProgramConfig, mapping, ipus: int, dist,
              optim: OptimConfig) -> IpuPlan:
    h, w, c = info.image_shape
    if h != w:
        raise ValueError(f"{info.path}: images of {h}x{w}: the IPU memory model takes square images")
    num_stages = len(mapping)
    return IpuPlan(
        model=traced.model.name, image_size=h, image_channels=c, num_classes=info.num_classes,
        micro_batch=micro_batch, gradient_accumulation=cfg.gradient_accumulation, replicas=dist.num_total_replicas,
        ipus_per_replica=ipus, pipeline_splits=tuple(traced.block_names[1:]) if num_stages > 1 else (),
        device_mapping=tuple(mapping) if num_stages > 1 else (), schedule=cfg.schedule, precision="32.32",
        recompute=cfg.recompute and num_stages > 1, available_memory_proportion=cfg.available_memory_proportion,
        optimizer=optimizer_state(optim.name, optim.momentum), chip=cfg.chip,
        system=dist.system or smallest_system_for(dist.num_total_replicas * ipus).name, dataset_images=info.num_samples,
        device_iterations=cfg.repeat_count)


@dataclass
class Program:
    """A compiled program: run it, evaluate it, and look at its placement and schedule."""

    model: object
    engine: Engine
    plan: IpuPlan
    memory: MemoryPlan
    schedule: OpSchedule  # one weight update of one replica
    profile: list
    infeed_queue: object
    outfeed_queue: object | None
    repeat_count: int

    @property
    def num_stages(self) -> int:
        return self.schedule.num_stages

    def run(self, count: int | None = None) -> list[StepMetrics]:
        """One host call: ``count`` (default ``repeat_count``) weight updates from the infeed.

        Their metrics go to the outfeed (when there is one) and are returned.
        """
        count = self.repeat_count if count is None else int(count)
        metrics = self.engine.train_steps(self.infeed_queue.next_steps(count))
        if self.outfeed_queue is not None:
            self.outfeed_queue.enqueue(metrics)
        return metrics

    def evaluate(self, split: str = "validation") -> tuple[float, float, int]:
        """Mean loss, top-1 accuracy and sample count on ``split`` of the infeed's dataset file."""
        dataset = open_dataset(self.infeed_queue.dataset.info.path, split)
        try:
            spec = self.infeed_queue.spec
            loader = evaluation_loader(dataset, replace(spec, grad_accum=1))
            return self.engine.evaluate(loader)
        finally:
            dataset.close()

    def memory_report(self) -> str:
        """Bytes per IPU by category, the fullest tile and whether it fits (``ipu.compile``)."""
        return format_memory_report(self.memory)

    def stage_costs(self, costs: str = "predicted") -> list[dict[str, float]]:
        """Seconds of one micro-batch's FWD / RECOMP / BWD per stage: ``predicted`` on a real IPU
        (``ipu.cost.prediction``) or ``measured`` on this CPU in the last step (pipelined programs)."""
        if costs == "predicted":
            return [dict(c) for c in predict(self.plan, self.profile).stage_costs]
        if costs != "measured":
            raise ValueError(f"costs must be 'predicted' or 'measured', got {costs!r}")
        run = getattr(self.engine.replicas[0], "last_run", None)
        if run is None:
            raise ValueError("measured costs need a pipelined program that has run at least one step")
        return [{kind: seconds / max(1, sum(label.startswith(kind + ".") for label in trace))
                 for kind, seconds in per_stage.items()} for per_stage, trace in zip(run.seconds, run.trace)]

    def bubble_share(self, costs: str = "predicted") -> float:
        """The idle share of the replica's IPU time in one weight update (``ipu.pipeline.timeline.bubble_share``)."""
        return bubble_share(self.schedule, self.stage_costs(costs))

    def timeline(self, costs: str = "predicted") -> str:
        """The schedule of one weight update per IPU (``IPU1: FWD.1 FWD.2 ... BWD.1 ...``) under a summary."""
        s = self.schedule
        head = (f"{s.kind} schedule, {s.num_stages} stage(s) on {s.num_ipus} IPU(s), {s.num_micro_batches} "
                f"micro-batches per weight update, recomputation {'on' if s.recompute else 'off'}; "
                f"pipeline bubble {self.bubble_share(costs):.1%} of the IPUs' time ({costs} costs)")
        return f"{head}\n{format_sequence(s)}"

    def plot_timeline(self, path: str | Path, costs: str = "predicted") -> Path:
        """The same schedule as a Gantt chart (PNG), each operation as long as its ``costs``."""
        return plot_timeline(self.schedule, self.stage_costs(costs), path)
