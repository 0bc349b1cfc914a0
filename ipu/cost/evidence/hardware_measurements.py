"""Published measurements on IPU hardware that check single parts of the cost model (primary sources).

**One compute set's fixed cost** (``compute_set_fixed_cycles``). Graphcore's lightweight-profiling
tutorial (``graphcore/examples``, ``tutorials/tutorials/popvision/lightweight_profiling/README.md``,
example 2) runs one compute set five times on tile 0 of a real IPU. The compute set holds one
supervisor vertex that spins ``iterations`` times over a 100-step ``volatile`` loop and then adds 1 to
``iterations`` (starting from 1). The profiler's cycle counts per execution are 3,905, 7,555, 11,203,
14,857 and 18,505. A straight line through them (3,650 cycles per iteration) meets zero iterations at
about 254 cycles: the sync, the vertex launch and return, and the profiler's own counter reads,
with no exchange (the vertex's operand lives on its tile). The same README (example 1) shows what the
instrumentation costs: wrapping one of a stage's two compute sets in a nested ``Block`` lengthens the
stage from 7,236-7,240 to 7,375-7,379 cycles, 139 more. So the compute set itself costs between the
intercept less 139 cycles and the intercept. Most of those 139 cycles fall outside the nested Block's own
interval: its operation reads 3,623 cycles where each of the stage's two equal operations takes
7,238 / 2 = 3,619, so a Block's reading inside its interval is about 4 cycles, and the compute set about
250 (``compute_set_fixed_cycles_equal_ops``; it assumes the two operations cost the same, as the
tutorial builds them). The vertex is C++, so its call and return are part of the figure; poplibs'
assembly vertices, which the model costs, start faster. The tutorial does not name the chip generation.

**Streaming vector work** (``STREAM_TRIAD_*``). Louw and McIntosh-Smith, "Using the Graphcore IPU for
traditional HPC applications" (University of Bristol, 2021), Table I: BabelSTREAM's Triad kernel on one
Mk1 IPU (C2 card), 32-bit: 3,726 GB/s with naive C++ vertices, 7,261 GB/s with optimised C++ and Poplar
primitives (scaled in-place addition), 12,420 GB/s with an assembly implementation supplied by
Graphcore. Triad moves 12 bytes per element (two 4-byte reads, one 4-byte write).
"""

from __future__ import annotations

from dataclasses import dataclass

LIGHTWEIGHT_PROFILING = ("Graphcore, graphcore/examples tutorials/tutorials/popvision/lightweight_profiling/"
                         "README.md (IPU hardware, tile 0)")
LOUW_2021 = ("Louw, McIntosh-Smith, 'Using the Graphcore IPU for traditional HPC applications', University "
             "of Bristol, 2021, Table I (Mk1 IPU, BabelSTREAM Triad, 32-bit)")

# Example 2: (iterations, cycles of that execution) of the one-vertex compute set.
PROFILED_EXECUTIONS: tuple[tuple[int, int], ...] = ((1, 3905), (2, 7555), (3, 11203), (4, 14857), (5, 18505))
# Example 1: a stage of two compute sets, without and with one of them in a nested Block (mid-range values).
STAGE_CYCLES, STAGE_CYCLES_NESTED_BLOCK = 7238, 7377
STAGE_OPERATION_NESTED = 3623  # the nested Block's own reading of the stage's second operation

STREAM_TRIAD_NAIVE_BYTES_PER_S = 3_726e9
STREAM_TRIAD_PRIMITIVES_BYTES_PER_S = 7_261e9
STREAM_TRIAD_ASSEMBLY_BYTES_PER_S = 12_420e9
STREAM_TRIAD_BYTES_PER_ELEMENT = 12  # a[i] = b[i] + q * c[i] in float32: two reads, one write


@dataclass(frozen=True)
class MeasuredRange:
    """A measured quantity known to lie between ``low`` and ``high``."""

    low: float
    high: float

    @property
    def mid(self) -> float:
        return (self.low + self.high) / 2


def zero_work_intercept() -> tuple[float, float]:
    """The least-squares line through ``PROFILED_EXECUTIONS``: (cycles at zero iterations, cycles per iteration)."""
    xs = [float(x) for x, _ in PROFILED_EXECUTIONS]
    ys = [float(y) for _, y in PROFILED_EXECUTIONS]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def block_instrumentation_cycles() -> int:
    """What one nested ``Block`` adds to the enclosing measurement (example 1)."""
    return STAGE_CYCLES_NESTED_BLOCK - STAGE_CYCLES


def in_block_instrumentation_cycles() -> float:
    """A Block's reading inside its own interval: example 1's nested operation less half its two-operation
    stage (both operations are the same compute set)."""
    return STAGE_OPERATION_NESTED - STAGE_CYCLES / 2


def compute_set_fixed_cycles_equal_ops() -> float:
    """The compute set's fixed cost when the in-interval instrumentation is example 1's (about 250)."""
    return zero_work_intercept()[0] - in_block_instrumentation_cycles()


def compute_set_fixed_cycles() -> MeasuredRange:
    """The measured fixed cost of a compute set that exchanges nothing: sync, vertex launch and return.

    The intercept holds some of the profiler's own cycles, at most one nested Block's worth."""
    intercept, _ = zero_work_intercept()
    return MeasuredRange(intercept - block_instrumentation_cycles(), intercept)


__all__ = ["LIGHTWEIGHT_PROFILING", "LOUW_2021", "MeasuredRange", "PROFILED_EXECUTIONS",
           "STREAM_TRIAD_ASSEMBLY_BYTES_PER_S", "STREAM_TRIAD_BYTES_PER_ELEMENT", "STREAM_TRIAD_NAIVE_BYTES_PER_S",
           "STREAM_TRIAD_PRIMITIVES_BYTES_PER_S", "block_instrumentation_cycles", "compute_set_fixed_cycles",
           "compute_set_fixed_cycles_equal_ops", "in_block_instrumentation_cycles", "zero_work_intercept"]
