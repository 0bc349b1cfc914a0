"""Hardware cycle counts from Graphcore Research's tessellate-ipu (primary measurements on a Bow IPU).

**One AMP matrix product per tile.** The notebook ``notebooks/IPU Peak Flops.ipynb`` runs, on every
tile of a Bow IPU (1,472 tiles at 1,850 MHz, ``d.tile_clock_frequency``), one ``ConvPartial1x1``
vertex multiplying an fp16 ``[N, 16]`` by a ``[16, 16]`` into fp16, reads the tile's cycle counter
before and after, subtracts the counter's own overhead (45 cycles, below) and reports TFLOPS =
2 N 16 16 x 1472 / time, for N = 16 ... 2,048. ``AMP_1X1_TFLOPS`` holds the printed figures at the
powers of two; ``amp_1x1_cycles(n)`` turns one back into the vertex's cycles.

**Reading the cycle counter.** ``tessellate_ipu/core/tile_interpreter_hw_primitives.py``,
``ipu_cycle_count_overhead``: "Experimental value, measured using two successive calls to
``ipu_cycle_count``", 45 cycles: two back-to-back one-vertex compute sets on one tile. Its hardware
test (``tests/core/test_tile_interpreter_hw_primitives.py``) asserts 30 < delta <= 150 cycles. A
full-chip sync before an exchange is not in either figure: it stays unmeasured.
"""

from __future__ import annotations

SOURCE = "graphcore-research/tessellate-ipu"
NOTEBOOK = SOURCE + ", notebooks/IPU Peak Flops.ipynb (Bow IPU, fp16 [N,16] x [16,16] per tile)"
CLOCK_HZ = 1.85e9
TILES = 1472
AMP_1X1_TFLOPS = {16: 55.49366766, 32: 96.70991447, 64: 152.79763288, 128: 211.11875736, 256: 264.00537751,
                  512: 299.77583828, 1024: 322.72628427, 2048: 334.94046716}
CYCLE_COUNT_OVERHEAD = 45  # ipu_cycle_count_overhead()
CYCLE_COUNT_DELTA_RANGE = (30, 150)  # the hardware test: 30 < delta <= 150
OVERHEAD_SOURCE = (SOURCE + ", tessellate_ipu/core/tile_interpreter_hw_primitives.py ipu_cycle_count_overhead "
                   "and tests/core/test_tile_interpreter_hw_primitives.py")


def amp_1x1_cycles(n: int) -> float:
    """The measured cycles of one tile's fp16 [n, 16] x [16, 16] ConvPartial1x1 vertex."""
    return 2 * n * 16 * 16 * TILES / (AMP_1X1_TFLOPS[n] * 1e12) * CLOCK_HZ
