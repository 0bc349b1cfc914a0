"""The compile step of a training run: place its plan on the simulated IPUs before any step.

:func:`compile_ipu` is what Poplar's compile is to a real run: it builds the run's ``IpuPlan``
(:func:`ipu_plan`, the same plan the POD prediction uses), places it on each IPU's tiles
(``ipu.memory.fit``), logs the memory report, plans the IO tiles, and stops the run in Poplar's
words when a tile does not fit, before any step and any collective, so that every instance
reaches the same verdict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ipu.io_tiles import IoTilePlan, plan_io_tiles
from ipu.memory import IpuOutOfMemoryError, MemoryPlan, fit, raise_if_out_of_memory
from ipu.memory_report import format_memory_report, plot_memory_report
from ipu.plan import IpuPlan
from ipu.specs import get_chip
from launch.config import TrainConfig
from poprun_py.systems import smallest_system_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompiledIpu:
    """What the compile step decided: the plan and its memory fit (None with ``ipu.check_fit: false``)
    and the IO tiles."""

    plan: IpuPlan | None
    memory: MemoryPlan | None
    io: IoTilePlan


def ipu_plan(cfg: TrainConfig, image_shape: tuple[int, int, int], num_classes: int, dataset_images: int) -> IpuPlan:
    """The run's ``IpuPlan``: one replica of ``cfg`` on the POD (``ipu.system``, which
    :func:`launch.config.distribute` sets to the launcher's ``--system``, or the smallest that holds
    every replica's IPUs). Raises ``ValueError`` when no IPU-POD could run this shape."""
    ipu = cfg.ipu
    system = ipu.system or smallest_system_for(cfg.data.replicas * ipu.ipus_per_replica).name
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
        here = (f"the loader's thread keeps {prefetch_depth} micro-batch(es) per replica ready (ipu.prefetch_depth)"
                if prefetch_depth else "the training thread builds each batch when it needs it (ipu.prefetch_depth=0)")
        logger.info("No IO tiles (ipu.num_io_tiles=0): host transfer does not overlap compute on an IPU; here %s.", here)
        return
    logger.info("IO tiles: %d per IPU (%d left for compute) hold %d prefetched micro-batch(es), %d of %d bytes; "
                "host transfer %s compute.", io.num_io_tiles, io.compute_tiles, prefetch_depth, io.io_bytes,
                io.io_budget_bytes, "overlaps" if io.overlap else "does NOT overlap")


__all__ = ["CompiledIpu", "compile_ipu", "ipu_plan", "plan_optimizer"]
