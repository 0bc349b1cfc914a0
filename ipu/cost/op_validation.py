"""The cost model op by op against poplibs' own benchmark table (``ipu.cost.evidence.poplibs_benchmarks``).

Each stored benchmark is rebuilt as the layer the model costs in a prediction (``layers.layer_cost``,
the planned passes of ``conv_planner``; ``vectors.reduction`` for a reduction) on the benchmark's chip
and tile count, half inputs with float partials and available memory 0.6 as the tools run, and its
cycles are set beside the table's: per row, and per kind of op in total (sum of the model's cycles
over the sum of the table's) with the spread of the rows' ratios. A convolution benchmark also pays
its weight update (one ``scaledAddTo`` over the weights), a fully-connected one its bias (the add,
its gradient's reduction and its update).

Rows the planner cannot express are listed apart with the reason (``unexpressed``), never left out
silently. What the IPU Model counts and the model leaves out is stated in ``docs/ipu.md``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ipu.cost import vectors as VC
from ipu.cost.assumptions import DEFAULT
from ipu.cost.bsp import Cycles
from ipu.cost.evidence.poplibs_benchmarks import Benchmark, benchmarks
from ipu.cost.layers import DeviceContext, layer_cost
from ipu.specs import get_chip
from models.profile import ConvShape, LayerProfile

AVAILABLE_MEMORY = 0.6  # poplibs' default availableMemoryProportion, which the tools keep
MAX_KERNEL_TAPS = 256  # beyond: poplibs folds kernel positions into the input channels (expandDims), the planner does not
KINDS = ("1x1", "1x1 strided", "conv", "conv strided", "depthwise", "depthwise strided", "matmul", "reduction")


@dataclass(frozen=True)
class OpCheck:
    """One benchmark: the table's cycles and the model's (None where the planner cannot express it)."""

    benchmark: Benchmark
    kind: str
    model: Cycles | None
    reason: str = ""  # why the model has no figure

    @property
    def ratio(self) -> float | None:
        return None if self.model is None else self.model.total / self.benchmark.cycles


@dataclass(frozen=True)
class KindSummary:
    chip: str
    kind: str
    rows: int
    table_cycles: int
    model_cycles: float
    low: float  # the lowest and highest row ratio
    median: float
    high: float

    @property
    def ratio(self) -> float:
        return self.model_cycles / self.table_cycles


def conv_shape(b: Benchmark) -> ConvShape:
    """The convolution of a ``single_conv_layer`` benchmark (output size from its padding and stride)."""
    h, w = b.flag("field")
    kh, kw = _pair(b.flag("kernel-size", 1))
    sh, sw = _pair(b.flag("stride", 1))
    upper = _pair(b.flag("padding", 0))
    lower = _pair(b.flag("padding-lower", upper))
    groups = b.flag("conv-groups", 1)
    ho, wo = (h + lower[0] + upper[0] - kh) // sh + 1, (w + lower[1] + upper[1] - kw) // sw + 1
    return ConvShape(b.flag("batch-size", 1), (h, w), b.flag("input-channels") * groups,
                     b.flag("output-channels") * groups, (kh, kw), max(sh, sw), groups, (ho, wo))


def _pair(value) -> tuple[int, int]:
    return tuple(value) if isinstance(value, tuple) else (value, value)


def kind_of(b: Benchmark) -> str:
    if b.tool == "reduce_op":
        return "reduction"
    if b.tool == "fully_connected_layer":
        return "matmul"
    shape = conv_shape(b)
    base = ("depthwise" if shape.groups > 1 and shape.groups == shape.in_channels
            else "1x1" if shape.kernel == (1, 1) else "conv")
    return base + (" strided" if shape.stride > 1 else "")


def _context(b: Benchmark, half: bool) -> DeviceContext:
    spec = get_chip(b.chip)
    return DeviceContext(spec, b.flag("tiles-per-ipu", spec.tiles), AVAILABLE_MEMORY, half, False)


def _layer(kind: str, shape: ConvShape, params: int) -> LayerProfile:
    ho, wo = shape.out_size
    macs = shape.macs
    return LayerProfile("bench", "bench", kind, 2 * macs, 4 * macs, params, shape.batch * ho * wo * shape.out_channels,
                        shape.batch * shape.in_hw[0] * shape.in_hw[1] * shape.in_channels, True,
                        (shape.batch, *shape.in_hw, shape.in_channels), shape)


def _weights(shape: ConvShape) -> int:
    return shape.in_channels // shape.groups * shape.out_channels * shape.kernel[0] * shape.kernel[1]


def _conv(b: Benchmark) -> Cycles:
    shape = conv_shape(b)
    ctx = _context(b, half=True)
    cost = layer_cost(_layer("conv", shape, _weights(shape)), ctx)
    update = ctx.elementwise(VC.VectorOp("scaled_add", _weights(shape), True))
    return cost.fwd + cost.bwd + update


def _matmul(b: Benchmark) -> Cycles:
    groups = b.flag("num-groups", 1)
    shape = ConvShape(b.flag("batch-size", 1), (1, 1), b.flag("input-size") * groups, b.flag("output-size") * groups,
                      groups=groups)
    half = b.flag("data-type", "half") == "half"
    ctx = _context(b, half)
    weights = _weights(shape)
    cost = layer_cost(_layer("dense", shape, weights + shape.out_channels), ctx)  # with a bias
    update = ctx.run([VC.VectorOp("scaled_add", weights, half), VC.VectorOp("scaled_add", shape.out_channels, half)])
    return cost.fwd + cost.bwd + update


def _reduction(b: Benchmark) -> Cycles:
    shape, dims = b.flag("shape"), b.flag("dims")
    dims = dims if isinstance(dims, tuple) else (dims,)
    half = b.flag("type") == "half"
    spec = get_chip(b.chip)
    tiles = b.flag("tiles-per-ipu", spec.tiles)
    elems = math.prod(shape)
    outputs = math.prod(s for i, s in enumerate(shape) if i not in dims)
    return VC.reduction(elems, outputs, outputs_per_tile(shape, dims, elems, tiles, half), tiles,
                        spec.threads_per_tile, half, DEFAULT)


def outputs_per_tile(shape: tuple[int, ...], dims: tuple[int, ...], elems: int, tiles: int, half: bool) -> int:
    """Outputs one tile's contiguous share of a linearly mapped row-major tensor touches."""
    per_tile = -(-elems // VC.tiles_for(elems, tiles, half))
    inner, touched = 1, 1
    for i in reversed(range(len(shape))):
        if inner >= per_tile:
            break
        if i not in dims:
            touched *= min(shape[i], -(-per_tile // inner))
        inner *= shape[i]
    return touched


def check(b: Benchmark) -> OpCheck:
    kind = kind_of(b)
    if b.tool == "single_conv_layer":
        kh, kw = conv_shape(b).kernel
        if kh * kw > MAX_KERNEL_TAPS:
            return OpCheck(b, kind, None, f"a {kh}x{kw} kernel over {conv_shape(b).in_channels} input channel(s): "
                           "poplibs folds kernel positions into the input channels (the expandDims transform); "
                           "the planner does not")
        return OpCheck(b, kind, _conv(b))
    return OpCheck(b, kind, _matmul(b) if kind == "matmul" else _reduction(b))


def checks(chip: str | None = None) -> list[OpCheck]:
    """Every stored benchmark (of ``chip``'s IPU Model target, or both)."""
    return [check(b) for b in benchmarks() if chip is None or b.chip == chip]


def summarise(rows: list[OpCheck]) -> list[KindSummary]:
    """Per chip and kind, over the rows the model expresses."""
    out = []
    for chip in dict.fromkeys(r.benchmark.chip for r in rows):
        for kind in KINDS:
            group = [r for r in rows if r.benchmark.chip == chip and r.kind == kind and r.model is not None]
            if not group:
                continue
            ratios = sorted(r.ratio for r in group)
            out.append(KindSummary(chip, kind, len(group), sum(r.benchmark.cycles for r in group),
                                   sum(r.model.total for r in group), ratios[0], statistics.median(ratios), ratios[-1]))
    return out


def format_summary(summary: list[KindSummary]) -> str:
    lines = ["| chip | kind | rows | table cycles | model cycles | model / table | row ratios (low, median, high) |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s.chip} | {s.kind} | {s.rows} | {s.table_cycles:,} | {s.model_cycles:,.0f} | {s.ratio:.2f} | "
                     f"{s.low:.2f}, {s.median:.2f}, {s.high:.2f} |")
    return "\n".join(lines)


def format_rows(rows: list[OpCheck]) -> str:
    lines = ["| target | benchmark | kind | table | model | ratio | matrix | vector | exchange | sync |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, m = r.benchmark, r.model
        if m is None:
            lines.append(f"| {b.target} | `{b.name}` | {r.kind} | {b.cycles:,} | | | {r.reason} | | | |")
            continue
        lines.append(f"| {b.target} | `{b.name}` | {r.kind} | {b.cycles:,} | {m.total:,.0f} | {r.ratio:.2f} | "
                     f"{m.matrix:,.0f} | {m.vector:,.0f} | {m.exchange:,.0f} | {m.sync:,.0f} |")
    return "\n".join(lines)
