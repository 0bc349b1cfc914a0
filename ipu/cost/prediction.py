"""What a run would take on a real IPU-POD, from how Poplar compiles and runs the graph.

Per micro-batch and pipeline stage: every layer's forward, input-gradient and weight-gradient
work as Poplar builds it (``ipu.cost.layers``: planned convolutions and matrix products,
vector ops by codelet), each compute set paying a sync and an exchange phase
(``ipu.cost.bsp``), plus the gradient-accumulator add (``ipu.cost.updates``) and the activation
transfer to the next stage. Per weight update: the pipeline schedule's supersteps
(``timeline.slot_durations``: ramp-up and ramp-down included), the host IO of the
micro-batches (hidden behind compute when IO tiles overlap it), the gradient all-reduce as a
ring over the IPU-Links of each IPU-Link domain and the GW-Links between domains, the
optimizer per weight tensor, and the host round trip per device-iteration call.

Constants are named where they are used; ``docs/ipu.md`` lists each with its source (a
poplibs file and function, a datasheet, a paper) or marks it as an assumption. None is
fitted to a published end-to-end figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ipu.cost.bsp import CATEGORIES, Cycles
from ipu.cost.layers import DeviceContext, LayerCost, layer_cost, workload_for
from ipu.cost.updates import HOST_CALL_S, accumulate, optimizer_step, weight_tensors
from ipu.pipeline.schedule import recomputes
from ipu.pipeline.split import StageSplit, replica_schedule, split_stages
from ipu.pipeline.timeline import slot_durations
from ipu.plan import IpuPlan
from ipu.precision import get_precision
from ipu.specs import PodSpec, get_chip
from models.profile import LayerProfile

IPU_SYNC_S = 2e-6  # assumed: a sync across the IPUs of a replica, once per pipeline slot
INTER_STAGE_LINKS = 2  # assumed: IPU-Links carrying activations between adjacent pipeline stages
LINK_EFFICIENCY = 0.7  # assumed: fraction of IPU-Link / GW-Link bandwidth a transfer achieves
ALLREDUCE_RING_LINKS = 2  # assumed: IPU-Links each IPU drives in the all-reduce ring
ALLREDUCE_STEP_LATENCY_S = 2e-6  # assumed: fixed cost of one ring step (sync + descriptor setup)
HOST_LINK_EFFICIENCY = 0.7  # assumed: fraction of the host link / host NIC bandwidth streaming achieves
BREAKDOWN = (*CATEGORIES, "pipeline_bubble", "host_io", "all_reduce", "weight_update", "host_call")


@dataclass(frozen=True)
class StageCost:
    """One IPU (pipeline stage): its layers' cycles per micro-batch and its per-update work."""

    ipu: int
    layers: tuple[LayerCost, ...]
    recompute: bool
    send_s: float  # activations (forward) or gradients (backward) to the neighbouring stage
    accumulate: Cycles  # per micro-batch
    optimizer: dict[str, Cycles]  # per weight update
    clock_hz: float

    @property
    def fwd(self) -> Cycles:
        return sum((c.fwd for c in self.layers), Cycles())

    @property
    def bwd(self) -> Cycles:
        return sum((c.bwd for c in self.layers), Cycles()) + self.accumulate

    @property
    def per_micro_batch(self) -> Cycles:
        return self.fwd + self.bwd + (self.fwd if self.recompute else Cycles())

    def seconds(self) -> dict[str, float]:
        """The schedule's operations on this stage, in seconds: FWD, RECOMP (if any), BWD."""
        out = {"FWD": self.fwd.total / self.clock_hz + self.send_s, "BWD": self.bwd.total / self.clock_hz + self.send_s}
        if self.recompute:
            out["RECOMP"] = self.fwd.total / self.clock_hz
        return out

    @property
    def optimizer_s(self) -> float:
        return sum(c.total for c in self.optimizer.values()) / self.clock_hz


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one weight update on the real POD, and what follows from it.

    ``breakdown`` (seconds per weight update) sums to ``step_time_s``: the bottleneck stage's
    matrix, vector, exchange and sync time over all micro-batches, the ``pipeline_bubble``
    (ramp-up/down and stage imbalance beyond that), ``host_io`` (the part not hidden behind
    compute), ``all_reduce``, ``weight_update`` (the optimizer on the busiest IPU) and
    ``host_call`` (the host round trip, per device-iteration call, spread over its updates).
    """

    plan: IpuPlan
    breakdown: dict[str, float]
    stage_seconds: tuple[float, ...]  # one micro-batch's FWD+RECOMP+BWD on each stage
    stage_costs: tuple[dict[str, float], ...]  # per stage: seconds of "FWD", "RECOMP", "BWD"
    host_io_total_s: float  # all host IO of the update, hidden or not
    io_overlapped: bool
    flops_per_image: float
    stages: tuple[StageCost, ...] = ()

    @property
    def step_time_s(self) -> float:
        return sum(self.breakdown.values())

    @property
    def images_per_s(self) -> float:
        """Images per second for the whole POD (all replicas)."""
        return self.plan.global_batch / self.step_time_s

    def time_to_train_s(self, epochs: float | None = None) -> float:
        epochs = self.plan.epochs if epochs is None else epochs
        return epochs * self.plan.dataset_images / self.images_per_s

    def utilisation(self) -> float:
        """Achieved FLOP/s over the POD's peak (matrix units, the plan's precision)."""
        half = get_precision(self.plan.precision).half_compute
        peak = self.plan.total_ipus * self.plan.pod.chip.peak_flops(half)
        return self.flops_per_image * self.images_per_s / peak


def device_context(plan: IpuPlan) -> DeviceContext:
    """The IPU every stage of ``plan`` runs on."""
    half = get_precision(plan.precision).half_compute
    return DeviceContext(get_chip(plan.chip), get_chip(plan.chip).tiles - plan.num_io_tiles,
                         plan.available_memory_proportion, half, half and plan.half_partials,
                         workload_for(plan.model, plan.model_overrides))


def predict(plan: IpuPlan, profile: Sequence[LayerProfile]) -> Prediction:
    """The predicted cost of ``plan``; ``profile`` is the model's profile at ``plan.micro_batch``."""
    pod = plan.pod
    split = split_stages(profile, plan.num_stages, plan.pipeline_splits)
    stages = stage_costs(plan, profile, split)
    schedule = replica_schedule(plan.schedule, split.num_stages, plan.gradient_accumulation, plan.recompute,
                                plan.device_mapping)
    seconds = [s.seconds() for s in stages]
    pipeline_s = sum(slot_durations(schedule, seconds, sync_s=IPU_SYNC_S if split.num_stages > 1 else 0.0))
    per_mb = [sum(c.values()) for c in seconds]
    per_ipu = _per_ipu(schedule, per_mb)  # stages sharing an IPU (device_mapping) add up on it
    worst = max(range(len(per_ipu)), key=per_ipu.__getitem__)
    n = plan.gradient_accumulation
    clock = pod.chip.clock_hz
    io_total = _host_io_s(plan, pod)
    overlapped = plan.num_io_tiles > 0 and (plan.ipus_per_replica == 1 or plan.schedule == "grouped")
    breakdown = dict.fromkeys(CATEGORIES, 0.0)
    for busiest in (s for s in stages if schedule.ipu_of(s.ipu) == worst):
        for category, cycles in busiest.per_micro_batch.as_dict().items():
            breakdown[category] += n * cycles / clock
        breakdown["exchange"] += n * 2 * busiest.send_s  # activations out, gradients back
    breakdown["pipeline_bubble"] = max(0.0, pipeline_s - n * per_ipu[worst])
    breakdown["host_io"] = max(0.0, io_total - pipeline_s) if overlapped else io_total
    breakdown["all_reduce"] = _all_reduce_s(plan, pod, profile, split)
    breakdown["weight_update"] = max(_per_ipu(schedule, [s.optimizer_s for s in stages]))
    breakdown["host_call"] = HOST_CALL_S / plan.device_iterations
    flops = sum(layer.flops_fwd + layer.flops_bwd for layer in profile) / plan.micro_batch
    flops += sum(layer.flops_fwd for layer, s in zip(profile, split.layer_stage)
                 if recomputes(s, split.num_stages, plan.recompute)) / plan.micro_batch
    return Prediction(plan, breakdown, tuple(per_mb), tuple(seconds), io_total, overlapped, flops, tuple(stages))


def _per_ipu(schedule, per_stage: Sequence[float]) -> list[float]:
    """Stage values summed per IPU of ``schedule.device_mapping`` (unchanged with one stage per IPU)."""
    out = [0.0] * schedule.num_ipus
    for s, value in enumerate(per_stage):
        out[schedule.ipu_of(s)] += value
    return out


def stage_costs(plan: IpuPlan, profile: Sequence[LayerProfile], split: StageSplit) -> list[StageCost]:
    """Every stage's layer costs (one micro-batch) and per-update work."""
    ctx = device_context(plan)
    mode = get_precision(plan.precision)
    act_bytes = mode.activation_bytes
    spec = ctx.spec
    link_bw = spec.ipu_link_bytes_per_s / spec.ipu_links * INTER_STAGE_LINKS * LINK_EFFICIENCY
    out = []
    for s in range(split.num_stages):
        layers = split.layers(profile, s)
        costs = tuple(layer_cost(layer, ctx, first=(s == 0 and i == 0)) for i, layer in enumerate(layers))
        send = layers[-1].activation_elems * act_bytes / link_bw if s < split.num_stages - 1 else 0.0
        tensors = weight_tensors(layers)
        acc = accumulate(tensors, ctx, mode.accumulator_bytes == 2) if plan.gradient_accumulation > 1 else Cycles()
        out.append(StageCost(s, costs, recomputes(s, split.num_stages, plan.recompute), send, acc,
                             optimizer_step(tensors, ctx, plan.optimizer, plan.precision), spec.clock_hz))
    return out


def _host_io_s(plan: IpuPlan, pod: PodSpec) -> float:
    """Streaming one update's micro-batches to every replica over the slower of host link and NICs."""
    pixel_bytes = 1 if plan.eight_bit_io else get_precision(plan.precision).activation_bytes
    per_replica = plan.gradient_accumulation * plan.image_elems * pixel_bytes
    link = pod.chip.host_link_bytes_per_s
    nics = pod.host_bytes_per_s(plan.num_hosts) / plan.replicas
    return per_replica / (min(link, nics) * HOST_LINK_EFFICIENCY)


def _all_reduce_s(plan: IpuPlan, pod: PodSpec, profile: Sequence[LayerProfile], split: StageSplit) -> float:
    """Ring all-reduce of every stage's gradients across the replicas, hierarchical over IPU-Link domains."""
    r = plan.replicas
    if r == 1:
        return 0.0
    grad_bytes = get_precision(plan.precision).accumulator_bytes
    mapping = plan.device_mapping or tuple(range(split.num_stages))
    stage_bytes = [0] * (1 + max(mapping))  # per IPU: the stages device_mapping puts on it
    for s in range(split.num_stages):
        stage_bytes[mapping[s]] += sum(layer.params for layer in split.layers(profile, s)) * grad_bytes
    spec = pod.chip
    ring_bw = spec.ipu_link_bytes_per_s / spec.ipu_links * ALLREDUCE_RING_LINKS * LINK_EFFICIENCY
    domains = min(pod.num_ilds, max(1, plan.total_ipus // pod.ipus_per_ild))
    inner = r // domains
    t_inner = 2 * (inner - 1) / inner * max(stage_bytes) / ring_bw + 2 * (inner - 1) * ALLREDUCE_STEP_LATENCY_S
    if domains == 1:
        return t_inner
    gw_bw = pod.gw_link_bytes_per_s * LINK_EFFICIENCY
    t_outer = 2 * (domains - 1) / domains * sum(stage_bytes) / gw_bw + 2 * (domains - 1) * ALLREDUCE_STEP_LATENCY_S
    return t_inner + t_outer
