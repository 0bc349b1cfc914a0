"""The cost model checked part by part and end to end, each against its own public data.

**Components** (``components``): each modelled quantity beside an independent public figure:
the exchange rate against Graphcore's stated IPU-Exchange bandwidth, the Mk1 tile memory, IPU-Links and
the load dependence of on-chip and IPU-Link latency against Jia et al. (``ipu.cost.evidence.jia2019``, secondary
sources), the matrix units against ``gc-flops``, the multi-rack all-reduce against the MLPerf v1.1 logs
it is calibrated on (marked as a calibration). Where no independent figure could be found the row says
so and carries none.

**End to end** (``comparisons``): ResNet-50 v1.5 trained with Graphcore's public recipe (``ipu.plan``
presets ``resnet50-*``): the Bow table (out of sample: the calibration is Mk2 only), the Mk2 MLPerf v1.1
logs (POD128 and POD256 enter the calibration through their difference; their levels, POD16 and POD64
do not) and the MLPerf blog. Graphcore's published EfficientNet throughputs and times to train set and
check nothing here; only the 1.8 h time to train (``PUBLISHED_HOURS_TO_TRAIN``) is printed by
``poprun-ipu predict``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ipu.cost.evidence import hardware_measurements as hw
from ipu.cost.evidence import jia2019 as jia
from ipu.cost.evidence import mlperf_v11
from ipu.cost.evidence import tessellate_ipu as tess
from ipu.cost import vectors
from ipu.cost import vertices
from ipu.cost.assumptions import DEFAULT, Assumptions
from ipu.cost.bsp import compute_set, superstep_fixed_cycles
from ipu.cost.prediction import predict
from ipu.plan import get_preset, load_profile
from ipu.specs import MEMORY_BYTES_PER_CYCLE, get_chip

BOW_TABLE = ("Graphcore performance results, Bow platforms table (graphcore.cn/performance-results): "
             "ResNet-50 v1.5, TensorFlow1, Pre-SDK2.5, ImageNet2012, 16.16")
MLPERF_BLOG = ("Krell, Liu, Menage, Bogdanski, 'Accelerating ResNet-50 Training on the IPU for MLPerf', "
               "Graphcore blog, 17 Jan 2022 (MLPerf Training v1.1, IPU-POD16)")


@dataclass(frozen=True)
class PublishedFigure:
    preset: str
    chip: str
    quantity: str  # "images/s" or "minutes" (time to train the preset's epochs)
    value: float
    source: str
    note: str = ""


def _mlperf(system: str) -> PublishedFigure:
    run = mlperf_v11.RUNS[system]
    note = (f"Mk2 {system}, batch {run.global_batch:,}, step {run.step_s * 1e3:.2f} ms"
            + (" (the POD128-POD256 difference is the calibration)" if system in ("POD128", "POD256") else ""))
    return PublishedFigure(f"resnet50-mlperf-{system.lower()}", "mk2", "images/s", run.images_per_s,
                           mlperf_v11.SOURCE, note)


PUBLISHED: tuple[PublishedFigure, ...] = (
    PublishedFigure("resnet50-pod16", "bow", "images/s", 42_029, BOW_TABLE, "Bow Pod16, batch 1,920"),
    PublishedFigure("resnet50-pod64", "bow", "images/s", 145_287, BOW_TABLE, "Bow Pod64, batch 2,560"),
    PublishedFigure("resnet50-pod256", "bow", "images/s", 425_514, BOW_TABLE, "Bow Pod256, batch 10,240"),
    *(_mlperf(system) for system in mlperf_v11.RUNS),
    PublishedFigure("resnet50-mlperf-pod16", "mk2", "images/s", 30_000, MLPERF_BLOG,
                    "\"30k images per second throughput\""),
    PublishedFigure("resnet50-mlperf-pod16", "mk2", "minutes", 28.3, MLPERF_BLOG,
                    "38 epochs to 75.9 %; includes evaluation and start-up, which the model does not"),
)

# A single-operation check of the matrix-unit constants: Graphcore's gc-flops tool reports
# "Flops per IPU (FP32): 87.1078 teraFLOPS" at "IPU clock speed: 1850 MHz" on a Bow IPU
# (Graphcore command-line tools documentation, gc-flops, section 6).
GC_FLOPS_BOW_FP32 = 87.1078e12
# Graphcore's GC200 product figures, "IPU-Exchange bandwidth: 8 TB/s using any communication pattern"
# (quoted in public study notes, thecharlieblake.co.uk/ipus, from Graphcore's IPU product page).
GC200_EXCHANGE_BYTES_PER_S = 8e12


@dataclass(frozen=True)
class ComponentCheck:
    """One modelled quantity beside an independent public figure (``public`` None: none found)."""

    component: str
    unit: str
    model: float | None
    public: float | None
    source: str
    calibration: bool = False
    public_low: float | None = None  # a measured range: public_low..public

    @property
    def ratio(self) -> float | None:
        """Model / public (the range's upper end)."""
        return None if self.model is None or not self.public else self.model / self.public

    @property
    def ratio_high(self) -> float | None:
        """Model / the range's lower end (None without a range)."""
        return None if self.model is None or not self.public_low else self.model / self.public_low


def components(assumptions: Assumptions = DEFAULT) -> list[ComponentCheck]:
    """Every component check, the model's side under ``assumptions``."""
    mk1, mk2, bow = get_chip("mk1"), get_chip("mk2"), get_chip("bow")
    outer = _outer_ring_model_s(assumptions)
    fixed = hw.compute_set_fixed_cycles()
    triad = _triad_model_bytes_per_s(assumptions)
    one_vertex = compute_set(assumptions, vector=vectors.SUPERVISOR_OVERHEAD).total
    sync, exchange = assumptions.sync_cycles, assumptions.exchange_fixed_cycles
    intercept, per_iteration = hw.zero_work_intercept()
    return [
        ComponentCheck("exchange, all tiles receiving (Mk2)", "TB/s",
                       mk2.tiles * mk2.exchange_bytes_per_cycle * mk2.clock_hz / 1e12, GC200_EXCHANGE_BYTES_PER_S / 1e12,
                       "Graphcore GC200: IPU-Exchange 8 TB/s any pattern"),
        ComponentCheck("tile memory, aggregate (Mk1)", "TB/s",
                       mk1.tiles * MEMORY_BYTES_PER_CYCLE * mk1.clock_hz / 1e12,
                       jia.MEMORY_AGGREGATE_BYTES_PER_S.value / 1e12, jia.MEMORY_AGGREGATE_BYTES_PER_S.cite()),
        ComponentCheck("tile memory, read + write per tile per cycle (Mk1)", "B/cycle", float(MEMORY_BYTES_PER_CYCLE),
                       jia.MEMORY_READ_BYTES_PER_CYCLE.value + jia.MEMORY_WRITE_BYTES_PER_CYCLE.value,
                       "read 16 + write 8: " + jia.MEMORY_READ_BYTES_PER_CYCLE.cite() + "; "
                       + jia.MEMORY_WRITE_BYTES_PER_CYCLE.cite()),
        ComponentCheck("IPU-Link rate per link and direction (Mk1)", "GB/s", mk1.ipu_link_bytes_per_s / mk1.ipu_links / 1e9,
                       jia.IPU_LINK_BIDIRECTIONAL_BYTES_PER_S.value / 2 / 1e9,
                       "half the nominal bidirectional 64 GB/s: " + jia.IPU_LINK_BIDIRECTIONAL_BYTES_PER_S.cite()),
        ComponentCheck("IPU-Links per chip (Mk1)", "links", float(mk1.ipu_links), jia.IPU_LINKS_PER_CHIP.value,
                       jia.IPU_LINKS_PER_CHIP.cite()),
        # The model's exchange and ring-step latencies take no load: a compute set's fixed exchange cycles
        # (ipu.cost.bsp) and a ring step's global sync (ipu.cost.collectives) are the same at any load.
        ComponentCheck("on-chip point-to-point latency, full load over no load (Mk1)", "x", 1.0,
                       jia.ON_CHIP_LATENCY_LOADED_OVER_IDLE.value,
                       "the model has no load term; " + jia.ON_CHIP_LATENCY_LOADED_OVER_IDLE.cite()),
        ComponentCheck("IPU-Link point-to-point latency, full load over no load (Mk1)", "x", 1.0,
                       jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN.value,
                       f"the model has no load term; the row takes the mildest slowdown, "
                       f"{jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN.value:.1f} of "
                       f"{jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN.value:.1f} to "
                       f"{jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MAX.value:.1f} (ratio "
                       f"{1 / jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MAX.value:.2f} at the worst); "
                       + jia.IPU_LINK_LATENCY_LOADED_OVER_IDLE_MIN.cite()),
        ComponentCheck("fixed cost of a compute set that exchanges nothing: sync, vertex launch and return "
                       "(IPU hardware, one tile)", "cycles", one_vertex,
                       fixed.high, "zero-iteration intercept of five profiled executions of one supervisor vertex, "
                       f"{intercept:.0f} cycles ({per_iteration:,.0f} per iteration), less up to the "
                       f"{hw.block_instrumentation_cycles()} cycles a nested profiler Block adds (about "
                       f"{hw.compute_set_fixed_cycles_equal_ops():.0f} with the Block's in-interval "
                       f"{hw.in_block_instrumentation_cycles():.0f} cycles; the vertex is C++); the model: "
                       f"sync {sync} (poplibs' CTC planner) + supervisor overhead {vectors.SUPERVISOR_OVERHEAD}; "
                       + hw.LIGHTWEIGHT_PROFILING,
                       public_low=fixed.low),
        ComponentCheck("fp32 streaming vector op, 12 B per element (Mk1)", "GB/s", triad / 1e9,
                       hw.STREAM_TRIAD_ASSEMBLY_BYTES_PER_S / 1e9,
                       "the model's in-place scaled add over three 2^23-element float arrays against BabelSTREAM "
                       "Triad in Graphcore's assembly (with optimised C++ and Poplar primitives: "
                       f"{hw.STREAM_TRIAD_PRIMITIVES_BYTES_PER_S / 1e9:,.0f} GB/s, ratio "
                       f"{triad / hw.STREAM_TRIAD_PRIMITIVES_BYTES_PER_S:.2f}); " + hw.LOUW_2021),
        ComponentCheck("on-chip sync and exchange latency per compute set (Mk1)", "cycles",
                       superstep_fixed_cycles(assumptions), None,
                       "not found: no readable source gives Jia et al.'s absolute on-chip sync or tile-to-tile "
                       "latency (the secondary sources give only the full-load / no-load ratio above; their "
                       f"Table 4.2 is an image); the model's {sync} + {exchange} cycles are poplibs' CTC-loss "
                       "planner's"),
        ComponentCheck("IPU-Link all-reduce and collective curves (Mk1)", "s", None, None,
                       "not found: no readable source gives Jia et al.'s measured IPU-Link bandwidth or their "
                       "all-reduce and collective curves; the model uses poplibs_test's link efficiency 0.85"),
        ComponentCheck("matrix-unit FP32 peak (Bow)", "TFLOP/s", bow.peak_flops(half=False) / 1e12,
                       GC_FLOPS_BOW_FP32 / 1e12, "gc-flops on a Bow IPU at 1850 MHz (Graphcore command-line tools)"),
        ComponentCheck("all-reduce between IPU-Link domains, POD256 - POD128 step (Mk2)", "ms", outer * 1e3,
                       mlperf_v11.outer_ring_delta_s() * 1e3, mlperf_v11.SOURCE + " (calibration)", calibration=True),
        ComponentCheck("single-IPU ResNet-50 training throughput, synthetic data", "images/s", None, None,
                       "not found: no published single-IPU synthetic-data ResNet-50 training figure was reachable"),
        _amp_1x1_check(assumptions),
        ComponentCheck("two successive one-vertex compute sets on one tile, no exchange (IPU hardware)", "cycles",
                       one_vertex, tess.CYCLE_COUNT_DELTA_RANGE[1],
                       f"reading the cycle counter twice, {tess.CYCLE_COUNT_OVERHEAD} cycles apart (the range is the "
                       "hardware test's bound); the model's sync is a chip-wide one, which one tile does not wait "
                       "for; " + tess.OVERHEAD_SOURCE, public_low=tess.CYCLE_COUNT_DELTA_RANGE[0]),
        ComponentCheck("one compute set of one supervisor vertex, beyond the vertex's own cycles (single-tile "
                       "simulator)", "cycles", one_vertex,
                       POPSYS_MAX_OVERHEAD, "upper bound: a 1,000-cycle vertex timed between two cycle stamps reads "
                       f"1,000 to {1000 + POPSYS_MAX_OVERHEAD} cycles, stamps included; " + POPSYS_SOURCE),
    ]


# graphcore/poplibs tests/codelets/Popsys.cpp at the parent of commit 5e41cbe3 (PopsysTimeIt, PopsysCycleStamp:
# BOOST_CHECK(cycles >= 1000 && cycles < 1000 + maxProfilingOverhead), maxProfilingOverhead = 150, VARIANTS Sim).
POPSYS_MAX_OVERHEAD = 150
POPSYS_SOURCE = "graphcore/poplibs tests/codelets/Popsys.cpp at the parent of 5e41cbe3 (the Sim target)"


def _amp_1x1_check(assumptions: Assumptions) -> ComponentCheck:
    """The model's ConvPartial1x1 vertex against tessellate-ipu's hardware cycles, summed over N = 32 ... 2,048."""
    bow = assumptions.chip_spec(get_chip("bow"))
    sizes = [n for n in tess.AMP_1X1_TFLOPS if n >= 32]
    model = {n: float(vertices.amp_1x1_cycles(1, 1, 1, 1, n, bow.threads_per_tile, bow.conv_units(True, True), True,
                                              True, bow.coeff_load_bytes_per_cycle)) for n in tess.AMP_1X1_TFLOPS}
    ratios = [model[n] / tess.amp_1x1_cycles(n) for n in sizes]
    return ComponentCheck(
        f"AMP 1x1 vertex, fp16 [N, 16] x [16, 16] per tile, N = {sizes[0]} to {sizes[-1]} (IPU hardware)", "cycles",
        sum(model[n] for n in sizes), sum(tess.amp_1x1_cycles(n) for n in sizes),
        f"summed over N = {', '.join(map(str, sizes))} (per size {min(ratios):.3f} to {max(ratios):.3f}; N = 16: "
        f"{model[16]:.0f} against {tess.amp_1x1_cycles(16):.0f}, {model[16] / tess.amp_1x1_cycles(16):.2f}); "
        + tess.NOTEBOOK)


TRIAD_ELEMENTS = 2**23  # per array: three float arrays of 32 MiB, where a compute set's fixed cycles are < 0.1 %


def _triad_model_bytes_per_s(assumptions: Assumptions) -> float:
    """The bytes per second of the model's float in-place scaled add (two reads, one write per element) on Mk1."""
    mk1 = get_chip("mk1")
    cycles = vectors.elementwise(vectors.VectorOp("scaled_add", TRIAD_ELEMENTS, half=False), mk1.tiles,
                                 mk1.threads_per_tile, assumptions).total
    return hw.STREAM_TRIAD_BYTES_PER_ELEMENT * TRIAD_ELEMENTS * mk1.clock_hz / cycles


def _outer_ring_model_s(assumptions: Assumptions) -> float:
    """The model's POD256 all-reduce over its POD128 all-reduce for the MLPerf runs (Mk2)."""
    larger, smaller = (_predict(f"resnet50-mlperf-pod{n}", "mk2", assumptions) for n in (256, 128))
    return larger.breakdown["all_reduce"] - smaller.breakdown["all_reduce"]


def _predict(preset: str, chip: str, assumptions: Assumptions):
    plan = replace(get_preset(preset), chip=chip)
    return predict(plan, load_profile(plan), assumptions)


@dataclass(frozen=True)
class Comparison:
    figure: PublishedFigure
    predicted: float
    predicted_without_host_io: float  # the same prediction with host IO fully hidden

    @property
    def ratio(self) -> float:
        """Predicted / published (above 1: the model is optimistic for throughput)."""
        if self.figure.quantity == "minutes":
            return self.figure.value / self.predicted
        return self.predicted / self.figure.value


def compare(figure: PublishedFigure, assumptions: Assumptions = DEFAULT) -> Comparison:
    p = _predict(figure.preset, figure.chip, assumptions)
    hidden = p.step_time_s - p.breakdown["host_io"]
    if figure.quantity == "minutes":
        return Comparison(figure, p.time_to_train_s() / 60, p.time_to_train_s() / 60 * hidden / p.step_time_s)
    return Comparison(figure, p.images_per_s, p.plan.global_batch / hidden)


def comparisons(chip: str | None = None, assumptions: Assumptions = DEFAULT) -> list[Comparison]:
    return [compare(f, assumptions) for f in PUBLISHED if chip is None or f.chip == chip]


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_components(rows: list[ComponentCheck]) -> str:
    lines = ["| component | model | public | ratio | source |", "|---|---|---|---|---|"]
    for c in rows:
        model = "" if c.model is None else f"{_num(c.model)} {c.unit}"
        public = "" if c.public is None else (f"{_num(c.public_low)}-" if c.public_low else "") + f"{_num(c.public)} {c.unit}"
        ratio = "" if c.ratio is None else f"{c.ratio:.2f}" + (f"-{c.ratio_high:.2f}" if c.ratio_high else "") + (
            " (calibrated)" if c.calibration else "")
        lines.append(f"| {c.component} | {model} | {public} | {ratio} | {c.source} |")
    return "\n".join(lines)


def format_comparisons(rows: list[Comparison]) -> str:
    lines = ["| preset | chip | quantity | predicted | predicted, host IO hidden | published | ratio | source |",
             "|---|---|---|---|---|---|---|---|"]
    for c in rows:
        f = c.figure
        fmt = "{:,.0f}" if f.quantity == "images/s" else "{:.1f}"
        lines.append(f"| `{f.preset}` | {f.chip} | {f.quantity} | {fmt.format(c.predicted)} | "
                     f"{fmt.format(c.predicted_without_host_io)} | {fmt.format(f.value)} | {c.ratio:.2f} | "
                     f"{f.note}; {f.source} |")
    return "\n".join(lines)
