"""The training configuration and the ``IpuPlan`` of ``ipu.plan``, both ways, in one place.

* :func:`ipu_plan`: a ``TrainConfig`` (and its dataset's image shape, classes and images) -> the run's plan:
  what the compile step places on the IPUs, what the POD prediction costs, what ``poprun-ipu --config`` starts from;
* :func:`plan_sections`: a plan -> the config sections it fixes (``data``, ``ipu``, ``run``), what a
  ``configs.yml`` entry with ``preset: NAME`` starts from, so the recipes' numbers are written once, in
  ``ipu/plan.py``;
* :func:`graph_plan`: a plan with the model of an ONNX graph (``model.onnx``, ``poprun-ipu --onnx``).

``tests/launch/train/test_plan.py`` checks the round trip: every preset's sections give the preset's plan back.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipu.plan import IpuPlan, Workload, optimizer_state
from models.onnx import Graph, cost_workload
from poprun_py.systems import smallest_system_for

if TYPE_CHECKING:
    from launch.train.config import TrainConfig


def onnx_model_label(path: str) -> str:
    """The plan's model name for the ONNX file at ``path``: ``onnx:<file name>`` (``models.onnx.OnnxFile.label``)."""
    return f"onnx:{Path(path).expanduser().resolve().name}"


def graph_workload(graph: Graph) -> Workload:
    """The cost model's activation and norm for an imported graph, which its profile rows do not say."""
    return Workload(**cost_workload(graph))


def ipu_plan(cfg: TrainConfig, image_shape: tuple[int, int, int], num_classes: int, dataset_images: int,
             workload: Workload | None = None) -> IpuPlan:
    """The run's ``IpuPlan``: one replica of ``cfg`` on the POD (``ipu.system``, which
    :func:`launch.train.distribute.distribute` sets to the launcher's ``--system``, or the smallest that holds
    every replica's IPUs); ``workload``: a graph model's (:func:`graph_workload`). Raises ``ValueError``
    when no IPU-POD could run this shape."""
    ipu = cfg.ipu
    system = ipu.system or smallest_system_for(cfg.data.replicas * ipu.ipus_per_replica).name
    options = cfg.model.kwargs
    size = int(options.pop("resolution", image_shape[0]))
    options.setdefault("in_channels", image_shape[2])
    recompute = ipu.recompute and ipu.ipus_per_replica > 1  # the CPU replica recomputes only when pipelined
    model, overrides, extra = cfg.model.name, tuple(sorted(options.items())), {}
    if cfg.model.onnx:  # the graph's own rows and workload, as poprun-ipu predict --onnx
        model, overrides, size = onnx_model_label(cfg.model.onnx), (), image_shape[0]
        extra = {"image_channels": image_shape[2]}
    return IpuPlan(model=model, model_overrides=overrides, image_size=size, **extra,
                   num_classes=num_classes, micro_batch=cfg.data.micro_batch,
                   gradient_accumulation=cfg.data.grad_accum, replicas=cfg.data.replicas,
                   ipus_per_replica=ipu.ipus_per_replica, pipeline_splits=tuple(ipu.pipeline_splits),
                   schedule=ipu.pipeline_schedule, precision=ipu.precision, recompute=recompute,
                   available_memory_proportion=ipu.available_memory_proportion, num_io_tiles=ipu.num_io_tiles,
                   prefetch_micro_batches=ipu.prefetch_micro_batches, eight_bit_io=True,
                   optimizer=optimizer_state(cfg.optim.name, cfg.optim.momentum),
                   system=system, chip=ipu.chip, num_hosts=ipu.num_hosts, device_iterations=ipu.device_iterations,
                   dataset_images=dataset_images, epochs=cfg.run.epochs, workload=workload)


def plan_sections(plan: IpuPlan) -> dict[str, dict[str, Any]]:
    """The fields a plan fixes, as config sections: the batch split (``data``), how each replica maps onto the
    IPUs (``ipu``) and the epochs (``run``)."""
    return {
        "data": {"micro_batch": plan.micro_batch, "grad_accum": plan.gradient_accumulation, "replicas": plan.replicas},
        "ipu": {"ipus_per_replica": plan.ipus_per_replica, "pipeline_splits": list(plan.pipeline_splits),
                "pipeline_schedule": plan.schedule, "recompute": plan.recompute, "precision": plan.precision,
                "available_memory_proportion": plan.available_memory_proportion, "num_io_tiles": plan.num_io_tiles,
                "prefetch_micro_batches": plan.prefetch_micro_batches, "system": plan.system, "num_hosts": plan.num_hosts,
                "chip": plan.chip, "device_iterations": plan.device_iterations},
        "run": {"epochs": plan.epochs},
    }


def graph_plan(base: IpuPlan, label: str, graph: Graph, num_classes: int) -> IpuPlan:
    """``base`` with the model of ``graph`` (``label``: ``onnx:<file name>``): its image size, channels,
    classes and workload; no pipeline splits or device mapping of the base's model; the base's recomputation
    checkpoint (a module of its own model) kept only when the graph has a module of that name."""
    n, c, h, w = graph.input_shape
    keeps = base.recompute_until and any(base.recompute_until in node.name.split("/") for node in graph.nodes)
    return replace(base, model=label, model_overrides=(), image_size=h, image_channels=c, num_classes=num_classes,
                   pipeline_splits=(), device_mapping=(), recompute_until=base.recompute_until if keeps else "",
                   workload=graph_workload(graph))
