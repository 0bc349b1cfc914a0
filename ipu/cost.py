"""What a run would take on a real IPU-POD, from first principles and the spec facts.

Per micro-batch and pipeline stage: compute cycles per layer from its FLOPs at the tile rate
(accumulating matrix units for convolutions and matrix products, the vector unit for the rest),
plus on-chip exchange of the layer's input and the bulk-synchronous syncs of its compute sets.
Per weight update: the pipeline schedule's supersteps (``timeline.slot_durations``: ramp-up and
ramp-down included), the host IO of the micro-batches (uint8 or float over the host link,
hidden behind compute when IO tiles overlap it), the gradient all-reduce as a ring over the
IPU-Links of each IPU-Link domain and the GW-Links between domains, and the optimizer step.

Every efficiency factor is a named constant below. They are assumptions chosen a priori from
the hardware description, not fitted to Graphcore's published results; ``docs/ipu.md`` compares
the outcome with those results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ipu.pipeline import StageSplit, replica_schedule, split_stages
from ipu.plan import IpuPlan
from ipu.precision import get_precision
from ipu.schedule import recomputes
from ipu.specs import IpuSpec, PodSpec
from ipu.timeline import slot_durations
from models.profile import LayerProfile

AMP_EFFICIENCY = 0.3  # fraction of matrix-unit peak a Poplar conv/matmul plan reaches at AMP 0.6
# (small, grouped and 1x1 convolutions at micro-batch 3 spread thinly over 1472 tiles)
AMP_REFERENCE_PROPORTION = 0.6  # the available memory proportion AMP_EFFICIENCY refers to
AMP_SPEED_EXPONENT = 0.25  # efficiency scales as (AMP / 0.6) ** 0.25: less workspace, slower plans
VECTOR_EFFICIENCY = 0.5  # fraction of the vector unit's peak for element-wise work and depthwise convs
EXCHANGE_EFFICIENCY = 0.5  # fraction of on-chip exchange bandwidth a layer's input redistribution gets
COMPUTE_SETS_FWD = 2  # compute sets (each ending in a sync) per layer, forward
COMPUTE_SETS_BWD = 4  # backward: input gradient, weight gradient and their reductions
SYNC_CYCLES = 150  # one on-chip bulk-synchronous sync
VERTEX_OVERHEAD_CYCLES = 400  # per compute set: supervisor launches workers, vertex loop set-up
IPU_SYNC_S = 2e-6  # a sync across the IPUs of a replica, once per pipeline slot
INTER_STAGE_LINKS = 2  # IPU-Links carrying activations between adjacent pipeline stages
LINK_EFFICIENCY = 0.7  # fraction of IPU-Link / GW-Link bandwidth a transfer achieves
ALLREDUCE_RING_LINKS = 2  # IPU-Links each IPU drives in the all-reduce ring
ALLREDUCE_STEP_LATENCY_S = 2e-6  # fixed cost of one ring step (sync + descriptor setup)
HOST_LINK_EFFICIENCY = 0.7  # fraction of the host link / host NIC bandwidth streaming achieves
OPTIMIZER_FLOPS_PER_PARAM = 12  # LARS/momentum update incl. norms and weight decay, vector rate


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one weight update on the real POD, and what follows from it.

    ``breakdown`` (seconds per weight update) sums to ``step_time_s``: ``compute`` and
    ``exchange_sync`` of the bottleneck stage over all micro-batches, ``pipeline_bubble`` (the
    ramp-up/down and stage imbalance beyond that), ``host_io`` (the part not hidden behind
    compute), ``all_reduce`` and ``weight_update``.
    """

    plan: IpuPlan
    breakdown: dict[str, float]
    stage_seconds: tuple[float, ...]  # one micro-batch's FWD+RECOMP+BWD on each IPU (its stages)
    stage_costs: tuple[dict[str, float], ...]  # per stage: seconds of "FWD", "RECOMP", "BWD"
    host_io_total_s: float  # all host IO of the update, hidden or not
    io_overlapped: bool
    flops_per_image: float

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


def predict(plan: IpuPlan, profile: Sequence[LayerProfile]) -> Prediction:
    """The predicted cost of ``plan``; ``profile`` is the model's profile at ``plan.micro_batch``."""
    pod = plan.pod
    spec = pod.chip
    split = split_stages(profile, plan.num_stages, plan.pipeline_splits)
    stage_costs, compute, exchange = _stage_costs(plan, spec, profile, split)
    schedule = replica_schedule(plan.schedule, split.num_stages, plan.gradient_accumulation, plan.recompute,
                                plan.device_mapping)
    pipeline_s = sum(slot_durations(schedule, stage_costs, sync_s=IPU_SYNC_S if split.num_stages > 1 else 0.0))
    # stages sharing an IPU add up on it
    compute, exchange = _per_ipu(schedule, compute), _per_ipu(schedule, exchange)
    per_mb = _per_ipu(schedule, [sum(c.values()) for c in stage_costs])
    worst = max(range(len(per_mb)), key=per_mb.__getitem__)
    n = plan.gradient_accumulation
    io_total = _host_io_s(plan, pod)
    overlapped = plan.num_io_tiles > 0 and (plan.ipus_per_replica == 1 or plan.schedule == "grouped")
    breakdown = {
        "compute": n * compute[worst],
        "exchange_sync": n * exchange[worst],
        "pipeline_bubble": pipeline_s - n * per_mb[worst],
        "host_io": max(0.0, io_total - pipeline_s) if overlapped else io_total,
        "all_reduce": _all_reduce_s(plan, pod, profile, split),
        "weight_update": _weight_update_s(plan, spec, profile, split),
    }
    flops = sum(layer.flops_fwd + layer.flops_bwd for layer in profile) / plan.micro_batch
    flops += sum(layer.flops_fwd for layer, s in zip(profile, split.layer_stage)
                 if recomputes(s, split.num_stages, plan.recompute)) / plan.micro_batch
    return Prediction(plan, breakdown, tuple(per_mb), tuple(stage_costs), io_total, overlapped, flops)


def _per_ipu(schedule, per_stage: Sequence[float]) -> list[float]:
    """Stage values summed per IPU of ``schedule.device_mapping`` (unchanged with one stage per IPU)."""
    out = [0.0] * schedule.num_ipus
    for s, value in enumerate(per_stage):
        out[schedule.ipu_of(s)] += value
    return out


def layer_seconds(
    layer: LayerProfile, spec: IpuSpec, compute_tiles: int, half: bool, amp: float
) -> tuple[float, float, float, float]:
    """(forward compute, forward exchange+sync, backward compute, backward exchange+sync) of one layer."""
    if layer.matmul:
        per_cycle = spec.amp_fp16_flops_per_cycle if half else spec.amp_fp32_flops_per_cycle
        efficiency = AMP_EFFICIENCY * (amp / AMP_REFERENCE_PROPORTION) ** AMP_SPEED_EXPONENT
    else:
        per_cycle = spec.vector_fp16_flops_per_cycle if half else spec.vector_fp32_flops_per_cycle
        efficiency = VECTOR_EFFICIENCY
    rate = compute_tiles * per_cycle * spec.clock_hz * efficiency
    move = layer.saved_elems * (2 if half else 4) / (spec.exchange_bytes_per_s * EXCHANGE_EFFICIENCY)
    sync = (SYNC_CYCLES + VERTEX_OVERHEAD_CYCLES) / spec.clock_hz
    return (layer.flops_fwd / rate, move + COMPUTE_SETS_FWD * sync,
            layer.flops_bwd / rate, 2 * move + COMPUTE_SETS_BWD * sync)


def _stage_costs(plan: IpuPlan, spec: IpuSpec, profile: Sequence[LayerProfile], split: StageSplit):
    """Per stage: {"FWD", "RECOMP", "BWD"} seconds, and compute / exchange+sync totals per micro-batch."""
    half = get_precision(plan.precision).half_compute
    tiles = spec.tiles - plan.num_io_tiles
    act_bytes = 2 if half else 4
    link_bw = spec.ipu_link_bytes_per_s / spec.ipu_links * INTER_STAGE_LINKS * LINK_EFFICIENCY
    costs, compute, exchange = [], [], []
    for s in range(split.num_stages):
        layers = split.layers(profile, s)
        parts = [layer_seconds(layer, spec, tiles, half, plan.available_memory_proportion) for layer in layers]
        fc, fx, bc, bx = (sum(p[i] for p in parts) for i in range(4))
        send = layers[-1].activation_elems * act_bytes / link_bw if s < split.num_stages - 1 else 0.0
        recompute = recomputes(s, split.num_stages, plan.recompute)
        cost = {"FWD": fc + fx + send, "BWD": bc + bx + send}
        if recompute:
            cost["RECOMP"] = fc + fx
        costs.append(cost)
        compute.append(fc + bc + (fc if recompute else 0.0))
        exchange.append(fx + bx + 2 * send + (fx if recompute else 0.0))
    return costs, compute, exchange


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
    stage_bytes = [count * grad_bytes for count in _ipu_params(plan, profile, split)]
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


def _weight_update_s(plan: IpuPlan, spec: IpuSpec, profile: Sequence[LayerProfile], split: StageSplit) -> float:
    half = get_precision(plan.precision).half_compute
    per_cycle = spec.vector_fp16_flops_per_cycle if half else spec.vector_fp32_flops_per_cycle
    rate = (spec.tiles - plan.num_io_tiles) * per_cycle * spec.clock_hz * VECTOR_EFFICIENCY
    return max(_ipu_params(plan, profile, split)) * OPTIMIZER_FLOPS_PER_PARAM / rate


def _ipu_params(plan: IpuPlan, profile: Sequence[LayerProfile], split: StageSplit) -> list[int]:
    """Parameters held by each IPU of a replica (the stages ``plan.device_mapping`` puts on it)."""
    mapping = plan.device_mapping or tuple(range(split.num_stages))
    out = [0] * (1 + max(mapping))
    for s in range(split.num_stages):
        out[mapping[s]] += sum(layer.params for layer in split.layers(profile, s))
    return out


def format_throughput(cpu_images_per_s: float, prediction: Prediction) -> str:
    """The line a training run logs: what the CPUs emulate and what the real POD would do."""
    plan = prediction.plan
    return (
        f"throughput: {cpu_images_per_s:,.1f} images/s emulated on CPU; predicted {prediction.images_per_s:,.0f} "
        f"images/s on {plan.system} ({plan.total_ipus} x {plan.pod.chip.name}), "
        f"{prediction.step_time_s * 1e3:.1f} ms per weight update"
    )
