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

Constants with a source (a poplibs file and function, a datasheet, a paper) are named where they are
used; the assumed ones, the planners' estimates and the one calibration are fields of
``ipu.cost.assumptions.Assumptions``, which ``predict`` takes (``DEFAULT`` unless a what-if replaces
some). ``docs/ipu.md`` lists each with its source. One is calibrated, on Mk2 only (the outer all-reduce
ring, ``collectives.outer_ring_bytes_per_s``); none is fitted to a published throughput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ipu.cost import collectives, host_io
from ipu.cost.assumptions import DEFAULT, Assumptions
from ipu.cost.bsp import CATEGORIES, Cycles
from ipu.cost.layers import DeviceContext, LayerCost, layer_cost, plan_workload
from ipu.cost.updates import accumulate, optimizer_step, weight_tensors
from ipu.pipeline.schedule import recomputes
from ipu.pipeline.split import StageSplit, first_layer_of, replica_schedule, split_stages
from ipu.pipeline.timeline import slot_durations
from ipu.plan import IpuPlan
from ipu.precision import get_precision
from ipu.specs import get_chip
from models.profile import LayerProfile

BREAKDOWN = (*CATEGORIES, "pipeline_bubble", "host_io", "all_reduce", "weight_update", "host_call")


@dataclass(frozen=True)
class StageCost:
    """One IPU (pipeline stage): its layers' cycles per micro-batch and its per-update work."""

    ipu: int
    layers: tuple[LayerCost, ...]
    recomputed: int  # the first ``recomputed`` layers are recomputed before backward (0: none)
    send_s: float  # activations (forward) or gradients (backward) to the neighbouring stage
    accumulate: Cycles  # per micro-batch
    optimizer: dict[str, Cycles]  # per weight update
    clock_hz: float

    @property
    def recompute(self) -> bool:
        return self.recomputed > 0

    @property
    def fwd(self) -> Cycles:
        return sum((c.fwd for c in self.layers), Cycles())

    @property
    def recomp(self) -> Cycles:
        return sum((c.fwd for c in self.layers[:self.recomputed]), Cycles())

    @property
    def bwd(self) -> Cycles:
        return sum((c.bwd for c in self.layers), Cycles()) + self.accumulate

    @property
    def per_micro_batch(self) -> Cycles:
        return self.fwd + self.bwd + self.recomp

    def seconds(self) -> dict[str, float]:
        """The schedule's operations on this stage, in seconds: FWD, RECOMP (if any), BWD."""
        out = {"FWD": self.fwd.total / self.clock_hz + self.send_s, "BWD": self.bwd.total / self.clock_hz + self.send_s}
        if self.recompute:
            out["RECOMP"] = self.recomp.total / self.clock_hz
        return out

    @property
    def optimizer_s(self) -> float:
        return sum(c.total for c in self.optimizer.values()) / self.clock_hz


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one weight update on the real POD, and what follows from it.

    ``breakdown`` (seconds per weight update) sums to ``step_time_s``: the bottleneck stage's
    matrix, vector, exchange and sync time over all micro-batches, the ``pipeline_bubble``
    (ramp-up/down and stage imbalance beyond that), ``host_io`` (what host input adds: the copy into
    the tiles without IO tiles, and whatever the hosts' NICs need beyond the rest of the step),
    ``all_reduce``, ``weight_update`` (the optimizer on the busiest IPU) and ``host_call`` (the host
    round trip, per device-iteration call, spread over its updates).
    """

    plan: IpuPlan
    breakdown: dict[str, float]
    stage_seconds: tuple[float, ...]  # one micro-batch's FWD+RECOMP+BWD on each stage
    stage_costs: tuple[dict[str, float], ...]  # per stage: seconds of "FWD", "RECOMP", "BWD"
    host_io_total_s: float  # the hosts' NIC time of the update's input (a bound on the step)
    io_overlapped: bool
    flops_per_image: float
    stages: tuple[StageCost, ...] = ()
    host_copy_s: float = 0.0  # one replica's copy of the update's input into the tiles

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


def device_context(plan: IpuPlan, assumptions: Assumptions = DEFAULT) -> DeviceContext:
    """The IPU every stage of ``plan`` runs on, as ``assumptions`` see it."""
    half = get_precision(plan.precision).half_compute
    spec = assumptions.chip_spec(get_chip(plan.chip))
    return DeviceContext(spec, spec.tiles - plan.num_io_tiles, plan.available_memory_proportion, half,
                         half and plan.half_partials, plan_workload(plan), plan.norm_span, assumptions)


def predict(plan: IpuPlan, profile: Sequence[LayerProfile], assumptions: Assumptions = DEFAULT) -> Prediction:
    """The predicted cost of ``plan``; ``profile`` is the model's profile at ``plan.micro_batch``;
    ``assumptions``: the model's assumed numbers (a what-if: ``replace(DEFAULT, sync_cycles=45)``)."""
    pod = plan.pod
    split = split_stages(profile, plan.num_stages, plan.pipeline_splits)
    stages = stage_costs(plan, profile, split, assumptions)
    schedule = replica_schedule(plan.schedule, split.num_stages, plan.gradient_accumulation, plan.recompute,
                                plan.device_mapping)
    seconds = [s.seconds() for s in stages]
    sync_s = collectives.global_sync_s(plan.ipus_per_replica, assumptions) if split.num_stages > 1 else 0.0
    pipeline_s = sum(slot_durations(schedule, seconds, sync_s=sync_s))
    per_mb = [sum(c.values()) for c in seconds]
    per_ipu = _per_ipu(schedule, per_mb)  # stages sharing an IPU (device_mapping) add up on it
    worst = max(range(len(per_ipu)), key=per_ipu.__getitem__)
    n = plan.gradient_accumulation
    clock = pod.chip.clock_hz
    breakdown = dict.fromkeys(BREAKDOWN, 0.0)
    for busiest in (s for s in stages if schedule.ipu_of(s.ipu) == worst):
        for category, cycles in busiest.per_micro_batch.as_dict().items():
            breakdown[category] += n * cycles / clock
        breakdown["exchange"] += n * 2 * busiest.send_s  # activations out, gradients back
    breakdown["pipeline_bubble"] = max(0.0, pipeline_s - n * per_ipu[worst])
    breakdown["all_reduce"] = _all_reduce_s(plan, profile, split, assumptions)
    breakdown["weight_update"] = max(_per_ipu(schedule, [s.optimizer_s for s in stages]))
    breakdown["host_call"] = assumptions.host_call_s / plan.device_iterations
    nic, copy = host_io.nic_s(plan, pod, assumptions), host_io.copy_s(plan, pod, assumptions)
    overlapped = host_io.overlaps(plan)
    breakdown["host_io"] = host_io.exposed_s(sum(breakdown.values()), nic, copy, overlapped)
    flops = sum(layer.flops_fwd + layer.flops_bwd for layer in profile) / plan.micro_batch
    recomputed = [layer for s in stages for layer in s.layers[:s.recomputed]]
    flops += sum(c.layer.flops_fwd for c in recomputed) / plan.micro_batch
    return Prediction(plan, breakdown, tuple(per_mb), tuple(seconds), nic, overlapped, flops, tuple(stages), copy)


def _per_ipu(schedule, per_stage: Sequence[float]) -> list[float]:
    """Stage values summed per IPU of ``schedule.device_mapping`` (unchanged with one stage per IPU)."""
    out = [0.0] * schedule.num_ipus
    for s, value in enumerate(per_stage):
        out[schedule.ipu_of(s)] += value
    return out


def recomputed_layers(plan: IpuPlan, layers: Sequence[LayerProfile], stage: int, num_stages: int) -> int:
    """How many of a stage's leading layers it recomputes: all on every stage that recomputes
    (``ipu.pipeline.schedule.recomputes``), except that a single-IPU replica stops at
    ``plan.recompute_until``, the first block (or module) whose activations it keeps (the recipe's last
    checkpoint)."""
    if not recomputes(stage, num_stages, plan.recompute):
        return 0
    if not plan.recompute_until:
        return len(layers)
    first = first_layer_of(layers, plan.recompute_until)
    if first is None:
        blocks = list(dict.fromkeys(layer.block for layer in layers))
        raise ValueError(f"recompute_until {plan.recompute_until!r} is not a block or module of {plan.model}: choose "
                         f"one of {', '.join(blocks)} (or a module path in their layer names)")
    return first


def stage_costs(plan: IpuPlan, profile: Sequence[LayerProfile], split: StageSplit,
                assumptions: Assumptions = DEFAULT) -> list[StageCost]:
    """Every stage's layer costs (one micro-batch) and per-update work."""
    ctx = device_context(plan, assumptions)
    mode = get_precision(plan.precision)
    act_bytes = mode.activation_bytes
    spec = ctx.spec
    link_bw = spec.ipu_link_bytes_per_s / spec.ipu_links * assumptions.inter_stage_links * assumptions.link_efficiency
    out = []
    for s in range(split.num_stages):
        layers = split.layers(profile, s)
        costs = tuple(layer_cost(layer, ctx, first=(s == 0 and i == 0)) for i, layer in enumerate(layers))
        send = layers[-1].activation_elems * act_bytes / link_bw if s < split.num_stages - 1 else 0.0
        tensors = weight_tensors(layers)
        acc = accumulate(tensors, ctx, mode.accumulator_bytes == 2) if plan.gradient_accumulation > 1 else Cycles()
        out.append(StageCost(s, costs, recomputed_layers(plan, layers, s, split.num_stages), send, acc,
                             optimizer_step(tensors, ctx, plan.optimizer, plan.precision), spec.clock_hz))
    return out


def _all_reduce_s(plan: IpuPlan, profile: Sequence[LayerProfile], split: StageSplit,
                  assumptions: Assumptions) -> float:
    """The gradient all-reduce of every IPU of a replica (the stages ``device_mapping`` puts on it)."""
    pod = plan.pod
    grad_bytes = get_precision(plan.precision).accumulator_bytes
    mapping = plan.device_mapping or tuple(range(split.num_stages))
    ipu_bytes = [0.0] * (1 + max(mapping))
    for s in range(split.num_stages):
        ipu_bytes[mapping[s]] += sum(layer.params for layer in split.layers(profile, s)) * grad_bytes
    domains = min(pod.num_ilds, max(1, plan.total_ipus // pod.ipus_per_ild))
    return collectives.all_reduce_s(ipu_bytes, plan.replicas, domains, assumptions.chip_spec(pod.chip),
                                    plan.total_ipus, assumptions)
