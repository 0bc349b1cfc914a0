"""What each layer of a profile costs one IPU, pass by pass, as Poplar would build it.

Convolutions and matrix products are planned (``ipu.cost.conv_planner``): forward, input gradient
and weight gradient, each a few compute sets. Everything else is vector work, costed op by op
after the sequence of popops/popnn calls poplibs makes for it (``ipu.cost.vectors``):

* group/batch norm forward (poplin ``normStatistics``, then ``normWhiten`` and
  ``normalise``): with the stable algorithm a mean reduction, the mean subtraction and a power
  reduction, otherwise one ``reduceMany`` of both (float partials either way); whitening
  (2 passes) and the affine transform (2 passes);
* norm backward (``normParamGradients``, ``normGradients``, ``normStatisticsGradients``):
  two ``reduceMany`` of two sums each and 8 element-wise passes;
* swish / ReLU and their gradients (popnn non-linearities), squeeze-excite (a spatial mean,
  two small planned matrix products, the gate and its broadcast), residual adds (with the
  drop-connect scaling when the model has it), pooling, dropout and the loss.

The profile does not say which activation or norm a model uses; ``workload_for`` takes the norm
from the model's config (its name and overrides) and the activation from its family (EfficientNet:
swish; ResNet: ReLU), as ``docs/ipu.md`` states; a plan of a graph read from ONNX carries its own
(``IpuPlan.workload``: its activations and norms are in the graph).
"""

from __future__ import annotations

from dataclasses import dataclass

from ipu.cost import collectives
from ipu.cost import vectors as VC
from ipu.cost.assumptions import DEFAULT, Assumptions
from ipu.cost.bsp import Cycles, compute_set, compute_sets
from ipu.cost.conv_planner import ConvPlan, conv_passes, plan_conv
from ipu.cost.vectors import VectorOp
from ipu.plan import IpuPlan, Workload
from ipu.specs import IpuSpec
from models.profile import ConvShape, LayerProfile

NORM_FWD_PASSES = 5  # remove mean, whiten (2), scale and shift (2)
NORM_BWD_PASSES = 8  # 2 products for the reductions, x gamma, copy, x varDelta, + meanDelta, scaled add, x invStd


def plan_workload(plan: IpuPlan) -> Workload:
    """The plan's own workload (an imported graph's), else its built-in model's (:func:`workload_for`)."""
    return plan.workload or workload_for(plan.model, plan.model_overrides)


def workload_for(model: str, overrides=()) -> Workload:
    """The workload of a built-in model's name with its ``build_model`` overrides: the norm (kind and groups)
    is the model's own config (``models.registry.model_config``: ``-gn`` or ``norm: group`` gives group
    norm, else batch norm); the activation and the rest go by the family."""
    norm = _norm_of(model, overrides)
    if model.startswith("resnet"):  # the MLPerf ResNet configs do not set stable_norm
        return Workload("relu", norm.kind if norm else "batch", norm.groups if norm else 32, False, False)
    return Workload(norm=norm.kind, norm_groups=norm.groups) if norm else Workload()


def _norm_of(model: str, overrides):
    """The model's ``NormSpec``, or None for a model without one (the dense net)."""
    from models.registry import model_config

    try:
        return model_config(model, **dict(overrides)).norm
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True)
class DeviceContext:
    """One IPU as a stage of the plan sees it."""

    spec: IpuSpec
    tiles: int  # compute tiles (IO tiles excluded)
    amp: float  # available memory proportion
    half: bool  # half-precision inputs to the matrix and vector units
    half_partials: bool
    workload: Workload = Workload()
    norm_span: int = 1  # replicas sharing batch norm statistics (a cross-replica sum per norm and pass)
    assumptions: Assumptions = DEFAULT  # spec is the chip as they see it (Assumptions.chip_spec)

    def __post_init__(self):
        if self.assumptions.chip_spec(self.spec) != self.spec:
            raise ValueError(f"the assumptions set chip facts that {self.spec.name}'s spec does not have: build the "
                             "context with spec=assumptions.chip_spec(chip)")

    @property
    def workers(self) -> int:
        return self.spec.threads_per_tile

    def elementwise(self, op: VectorOp) -> Cycles:
        """One element-wise compute set over this IPU's compute tiles (``vectors.elementwise``)."""
        return VC.elementwise(op, self.tiles, self.workers, self.assumptions)

    def run(self, ops: list[VectorOp]) -> Cycles:
        """Element-wise compute sets one after another (``vectors.run``)."""
        return VC.run(ops, self.tiles, self.workers, self.assumptions)

    def reduction(self, elems: int, outputs: int, outputs_per_tile: int, half: bool | None = None) -> Cycles:
        """A reduction over this IPU's compute tiles (``vectors.reduction``; ``half`` default: the context's)."""
        half = self.half if half is None else half
        return VC.reduction(elems, outputs, outputs_per_tile, self.tiles, self.workers, half, self.assumptions)

    def scalar_ops(self, count: int) -> Cycles:
        """``count`` scalar compute sets (``vectors.scalar_ops``)."""
        return VC.scalar_ops(count, self.workers, self.assumptions)


@dataclass(frozen=True)
class LayerCost:
    layer: LayerProfile
    fwd: Cycles
    bwd: Cycles  # input gradient and weight gradient
    plans: tuple[ConvPlan, ...] = ()

    def plan_text(self) -> str:
        return "; ".join(f"{p.problem.pass_name} {p.describe()}" for p in self.plans)


def layer_cost(layer: LayerProfile, ctx: DeviceContext, first: bool = False) -> LayerCost:
    """Cycles of the busiest tile for one micro-batch of ``layer`` (forward and backward)."""
    if layer.matmul and layer.conv is not None:
        return _planned(layer, layer.conv, ctx, first)
    if layer.matmul:
        return _unplanned(layer, ctx)
    cost = {"norm": _norm, "act": _activation, "se": _squeeze_excite, "add": _residual, "pool": _pool,
            "dropout": _dropout, "loss": _loss}.get(layer.kind, _elementwise)
    return cost(layer, ctx)


def _plans(shape: ConvShape, ctx: DeviceContext, skip_input_grad: bool = False) -> list[ConvPlan]:
    problems = conv_passes(shape)
    if skip_input_grad:
        problems = [p for p in problems if p.pass_name != "bwd"]
    return [plan_conv(p, ctx.spec.tile_view, ctx.tiles, ctx.amp, ctx.half, ctx.half_partials, ctx.assumptions)
            for p in problems]


def _as_cycles(plans: list[ConvPlan], assumptions: Assumptions) -> Cycles:
    total = Cycles()
    for p in plans:
        total = total + compute_sets(assumptions, p.compute_sets, p.matrix_cycles, p.vector_cycles, p.exchange_cycles)
    return total


def _planned(layer: LayerProfile, shape: ConvShape, ctx: DeviceContext, first: bool) -> LayerCost:
    plans = _plans(shape, ctx, skip_input_grad=first)
    fwd = _as_cycles(plans[:1], ctx.assumptions)
    bwd = _as_cycles(plans[1:], ctx.assumptions)
    if layer.kind == "dense" and layer.params > shape.in_channels * shape.out_channels:  # a bias
        fwd = fwd + ctx.elementwise(VectorOp("binary", layer.activation_elems, ctx.half))
        bwd = bwd + ctx.reduction(layer.activation_elems, shape.out_channels, shape.out_channels)
    return LayerCost(layer, fwd, bwd, tuple(plans))


def _unplanned(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    """A matrix layer without geometry: its FLOPs at the AMP's peak rate in one compute set each way."""
    rate = 2 * ctx.spec.amp_macs_per_cycle(ctx.half, ctx.half_partials) * ctx.tiles
    return LayerCost(layer, compute_set(ctx.assumptions, matrix=layer.flops_fwd / rate),
                     compute_set(ctx.assumptions, matrix=layer.flops_bwd / rate))


def _channels(layer: LayerProfile) -> tuple[int, int]:
    shape = layer.in_shape or (1, layer.activation_elems)
    return shape[0], shape[-1]


def _norm(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    e, (n, c) = layer.activation_elems, _channels(layer)
    w = ctx.workload
    outputs, per_tile = (n * w.norm_groups, w.norm_groups) if w.norm == "group" else (c, c)

    def reduce_many(outs: int, touched: int) -> Cycles:  # two sums over the same data, one set of stages
        return ctx.reduction(2 * e, 2 * outs, 2 * touched)

    passes = [VectorOp("binary", e, ctx.half)]
    if w.stable_norm:  # mean, subtract it, then the power of the centred values (float partials)
        stats = ctx.reduction(e, outputs, per_tile) * 2
        fwd_passes = NORM_FWD_PASSES
    else:  # mean and power in one reduceMany
        stats = reduce_many(outputs, per_tile)
        fwd_passes = NORM_FWD_PASSES - 1
    fwd = stats + ctx.scalar_ops(1) + ctx.run(passes * fwd_passes)
    bwd = reduce_many(c, c) + reduce_many(outputs, per_tile) + ctx.scalar_ops(2) + ctx.run(passes * NORM_BWD_PASSES)
    if w.norm == "batch" and ctx.norm_span > 1:  # the statistics, then their gradients, summed over replicas
        shared = collectives.norm_statistics(c, ctx.norm_span, ctx.spec, ctx.assumptions)
        fwd, bwd = fwd + shared, bwd + shared
    return LayerCost(layer, fwd, bwd)


def _activation(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    name = ctx.workload.activation
    e = layer.activation_elems
    return LayerCost(layer, ctx.elementwise(VectorOp(name, e, ctx.half)),
                     ctx.elementwise(VectorOp(f"{name}_grad", e, ctx.half)))


def _squeeze_excite(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    e, (n, c) = layer.activation_elems, _channels(layer)
    s = max(1, (layer.params - c) // (2 * c + 1))  # params = C*S + S + S*C + C
    fc1, fc2 = ConvShape(n, (1, 1), c, s), ConvShape(n, (1, 1), s, c)
    plans = _plans(fc1, ctx) + _plans(fc2, ctx)
    pool = ctx.reduction(e, n * c, c)
    small = [VectorOp("binary", n * s, ctx.half), VectorOp(ctx.workload.activation, n * s, ctx.half),
             VectorOp("binary", n * c, ctx.half), VectorOp("sigmoid", n * c, ctx.half)]
    gate = VectorOp("binary", e, ctx.half)
    fwd = pool + _as_cycles([plans[0], plans[3]], ctx.assumptions) + ctx.run(small + [gate])
    small_grads = [VectorOp("binary", n * c, ctx.half), VectorOp(f"{ctx.workload.activation}_grad", n * s, ctx.half)]
    bwd = (ctx.run([gate]) + pool + ctx.run(small_grads)
           + _as_cycles([p for i, p in enumerate(plans) if i not in (0, 3)], ctx.assumptions) + ctx.run([gate, gate]))
    return LayerCost(layer, fwd, bwd, tuple(plans))


def _residual(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    op = VectorOp("binary", layer.activation_elems, ctx.half)
    scaled = ctx.workload.drop_connect
    return LayerCost(layer, ctx.run([op] * (2 if scaled else 1)), ctx.run([op] * (1 if scaled else 0)))


def _pool(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    n, c = _channels(layer)
    e_in = max(1, int(layer.flops_fwd))  # the pooling profile counts one FLOP per input element
    if layer.activation_elems <= n * c:  # global average pooling
        return LayerCost(layer, ctx.reduction(e_in, n * c, c), ctx.elementwise(VectorOp("binary", e_in, ctx.half)))
    taps = VectorOp("max", layer.activation_elems * ctx.assumptions.maxpool_taps, ctx.half)
    return LayerCost(layer, ctx.elementwise(taps), ctx.elementwise(taps))


def _dropout(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    op = VectorOp("binary", layer.activation_elems, ctx.half)
    return LayerCost(layer, ctx.run([op, op]), ctx.run([op]))


def _loss(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    e = max(1, layer.saved_elems)
    op = VectorOp("binary", e, False)
    return LayerCost(layer, ctx.run([op] * ctx.assumptions.loss_fwd_sets),
                     ctx.run([op] * ctx.assumptions.loss_bwd_sets))


def _elementwise(layer: LayerProfile, ctx: DeviceContext) -> LayerCost:
    """Any other vector layer: one pass forward, one backward."""
    op = VectorOp("binary", layer.activation_elems, ctx.half)
    return LayerCost(layer, ctx.elementwise(op), ctx.elementwise(op))
