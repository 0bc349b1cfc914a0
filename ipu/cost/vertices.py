"""Cycle estimates of the convolution vertices one tile runs, after poplibs' own estimators.

Every function here restates, in closed form over numpy arrays (so that the planner can score
thousands of partitions at once), a cycle estimator from Graphcore's poplibs
(``lib/poplin/PerformanceEstimation.hpp``, ``lib/poplin/ConvUtilInternal.cpp``,
``lib/poplin/ConvReducePlan.cpp``); the comment on each constant names the estimator it comes
from. Cycles are tile cycles. A worker context issues one instruction every ``workers`` cycles,
so a vertex costs ``workers x`` its slowest worker's cycles plus the supervisor's own cycles.

Simplifications (labelled as such in ``docs/ipu.md``): a worker's row pieces are costed at
their average length (exact while every piece has 3 or more elements, where the cost is
linear); the 1x1 vertex uses the half-input code path of 16 units with half partials (= 8 units
with float partials); SLIC is the half-input vertex with one channel per conv group.
"""

from __future__ import annotations

import functools

import numpy as np

# --- AMP "nx1" vertex (ConvPartialnx1), half or float inputs -----------------------------------
NX1_WORKER_START = 17  # getConvPartialnx1WorkerCycles: worker start to PartitionLoop (+1 half partials)
NX1_ENTRY_POINTERS = 3  # per worklist entry: second tripack pointer and special stride
NX1_ENTRY_CYCLES_HALF = (17, 29, 33)  # entries of 0, 1, 2 field elements (half inputs)
NX1_ENTRY_CYCLES_FLOAT = (17, 33, 44)
NX1_LONG_ENTRY_HALF = 34  # n >= 3: 34 + core x (n - 3)
NX1_LONG_ENTRY_FLOAT = 45
AMP_CORE_CYCLES_HALF = 4  # worker cycles per field element, all engines busy
AMP_CORE_CYCLES_FLOAT = 8
NX1_RETENTION_SAVING = 9  # convnx1WorkerRetentionSavings, per worklist entry
NX1_MIN_WORKER_SLACK = 9  # getConvPartialnx1SupervisorKernelLoopCycleEstimate: max(max, min + 9)
NX1_SUPERVISOR_BASE = 109  # convNx1Overhead
ZERO_RETENTION_SAVING_HALF, ZERO_RETENTION_SAVING_FLOAT = 10, 9  # zeroPartialsRetentionSavings
NX1_FILTER_HEIGHT_LOAD = {1: 15, 2: 46, 4: 60}  # getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat
NX1_INNERMOST_EXTRA = 3
NX1_KERNEL_OUTER = 14  # per kernel row
NX1_KERNEL_INNER = 12  # per kernel position: 17 - 5
# --- AMP "1x1" vertex (ConvPartial1x1Out) -------------------------------------------------------
ONE_BY_ONE_SHORT = {True: (21, 32, 41), False: (22, 33, 42)}  # n = 0, 1, 2 with/without zeroing
ONE_BY_ONE_LONG = {True: 37, False: 38}  # n >= 3: base + core x (n - 3)
ONE_BY_ONE_RETENTION = (7, 3)  # conv1x1WorkerRetentionSavings (total, per in-chan group)
ONE_BY_ONE_TAG = 14  # max(max, min + 14)
ONE_BY_ONE_SUPERVISOR = 50  # supervisorNonloopOverhead
# --- zeroing the partials (getZeroSupervisorVertexCycleEstimate) -------------------------------
ZERO_WORKER_BASE_HALF, ZERO_WORKER_BASE_FLOAT = 15, 14
DATA_PATH_BITS = 64  # Target::getDataPathWidth(): vectors of 4 half / 2 float
# --- SLIC vertex (ConvPartial1xNSLIC), half inputs, 1x4 kernel windows -------------------------
SLIC_WINDOW = 4
SLIC_WORKER_PREAMBLE = 17  # 2 + 3 + 1 + 2 + 4 + 2 + 2 + 1
SLIC_WEIGHT_LOAD_PER_WORKER = 11  # 8 or 16 groups: 10 + 1
SLIC_SUPERVISOR_PREAMBLE = 28
SLIC_BRNZDEC_STALL = 6
# --- partial-sum reductions (getReduceCycleEstimate, estimateConvReduceCycles) -----------------
REDUCE_BASE = 32
REDUCE_OUTER_OVERHEAD = {(True, True): 7, (True, False): 9, (False, True): 6, (False, False): 8}  # (float out, float partials)


def worker_share(elems, workers: int):
    """Field elements of the busiest worker: the contiguous split of poplibs."""
    return -(-np.asarray(elems) // workers)


def worker_rows(field, row, workers: int):
    """Each worker's (elements, worklist entries) under poplibs' split (partitionConvPartialByWorker):
    worker w takes the flattened field's elements [w E / workers, (w + 1) E / workers), one
    worklist entry per row it touches."""
    field, row = np.asarray(field), np.maximum(np.asarray(row), 1)
    out = []
    for w in range(workers):
        begin, end = w * field // workers, (w + 1) * field // workers
        entries = np.where(end > begin, (np.maximum(end, 1) - 1) // row - begin // row + 1, 0)
        out.append((end - begin, entries))
    return out


def _entry_cycles(n, half: bool, hh16: bool):
    short = NX1_ENTRY_CYCLES_HALF if half else NX1_ENTRY_CYCLES_FLOAT
    long_base = NX1_LONG_ENTRY_HALF if half else NX1_LONG_ENTRY_FLOAT
    core = AMP_CORE_CYCLES_HALF if half else AMP_CORE_CYCLES_FLOAT
    n = np.asarray(n)
    two = short[2] + (1 if hh16 else 0)
    return np.select([n <= 0, n == 1, n == 2], [short[0], short[1], two], long_base + core * (n - 3))


def _nx1_worker(elems, entries, half: bool, half_partials: bool, hh16: bool):
    per_entry = np.round(np.where(entries > 0, elems / np.maximum(entries, 1), 0))
    entry = NX1_ENTRY_POINTERS + _entry_cycles(per_entry, half, hh16) - NX1_RETENTION_SAVING
    return NX1_WORKER_START + (1 if half_partials else 0) + entries * entry


def weight_load_cycles(conv_units: int, coeff_load_bytes: int) -> int:
    """Loading a conv unit set's weights: units x 32 bytes at half the 128-bit rate
    (getConvPartialAmpSupervisorWeightLoadCycleEstimate; use128BitConvUnitLoad is off by default)."""
    return conv_units * 32 // (coeff_load_bytes // 2)


def amp_nx1_cycles(groups, in_groups, out_groups, out_passes, kernel_h, kernel_w, field, row,
                   workers: int, conv_units: int, half: bool, half_partials: bool,
                   coeff_load_bytes: int, filter_height: int = 1, zero_field=None):
    """One tile's ConvPartialnx1 vertex (partials zeroed first) for its share of a convolution.

    ``groups``, ``in_groups``, ``out_groups``: conv groups and channel groups (of the vertex's
    in/out channel grouping) on the tile; ``out_passes``: output-channel passes per group
    (out channels per group / conv units); ``field``: output elements (batch x rows x columns)
    on the tile, ``row`` the elements per row; ``kernel_h`` counts rows of ``filter_height``
    kernel rows (channels fewer than a conv unit's weights fill it with kernel rows). ``zero_field``:
    the output elements zeroed when more than ``field`` (a dilated input: each kernel position
    reaches only ``field`` of them).
    """
    hh16 = half and half_partials and conv_units == 16
    per_worker = [_nx1_worker(e, n, half, half_partials, hh16) for e, n in worker_rows(field, row, workers)]
    busiest, idlest = np.maximum.reduce(per_worker), np.minimum.reduce(per_worker)
    kernel_loop = np.maximum(workers * busiest, workers * idlest + NX1_MIN_WORKER_SLACK)
    kernel_loop = kernel_loop * out_passes * kernel_h * kernel_w
    height_load = NX1_FILTER_HEIGHT_LOAD.get(filter_height, 20 * filter_height)
    innermost = weight_load_cycles(conv_units, coeff_load_bytes) + height_load + NX1_INNERMOST_EXTRA
    inner = kernel_h * (NX1_KERNEL_OUTER + kernel_w * (NX1_KERNEL_INNER + out_passes * innermost)) + kernel_loop
    zero_saving = ZERO_RETENTION_SAVING_HALF if half_partials else ZERO_RETENTION_SAVING_FLOAT
    supervisor = (NX1_SUPERVISOR_BASE + workers * NX1_RETENTION_SAVING + workers * zero_saving
                  + groups * (out_groups * 17 + (out_groups - 1) * 6 + 1) + (groups - 1) * 6 + 1
                  + groups * (16 + in_groups * (14 + out_groups * (14 + inner))))
    zeroed = field if zero_field is None else zero_field
    zeroing = zero_cycles(np.asarray(zeroed) * out_passes * conv_units, groups * out_groups, workers, half_partials)
    return supervisor + zeroing


def amp_1x1_cycles(groups, in_groups, out_groups, out_passes, field, workers: int, conv_units: int,
                   half: bool, half_partials: bool, coeff_load_bytes: int):
    """One tile's ConvPartial1x1Out vertex: one worklist entry per worker, zeroing in the vertex
    (the half-input code path shared by 16 units with half partials and 8 with float partials)."""
    core = AMP_CORE_CYCLES_HALF if half else AMP_CORE_CYCLES_FLOAT
    retention = ONE_BY_ONE_RETENTION if half else (0, 0)

    def worker(n, zeroing: bool):
        n = np.asarray(n)
        return np.select([n <= 0, n == 1, n == 2], list(ONE_BY_ONE_SHORT[zeroing]),
                         ONE_BY_ONE_LONG[zeroing] + core * (n - 3)) - retention[0]

    def tile(zeroing: bool):
        busiest = workers * worker(worker_share(field, workers), zeroing)
        return np.maximum(busiest, workers * worker(np.asarray(field) // workers, zeroing) + ONE_BY_ONE_TAG)

    with_zero, without = tile(True), tile(False)
    loads = weight_load_cycles(conv_units, coeff_load_bytes)
    return (ONE_BY_ONE_SUPERVISOR + workers * (retention[0] + retention[1] * (in_groups * groups - 1))
            + groups * (13 + (in_groups - 1) * (15 + out_groups * (19 + out_passes * (6 + loads + without)))
                        + (11 + out_groups * (18 + out_passes * (7 + loads + with_zero)))))


def zero_cycles(elems, vertex_groups, workers: int, half_partials: bool):
    """Zeroing ``elems`` partials per group over the workers (a Zero supervisor vertex)."""
    width = DATA_PATH_BITS // (16 if half_partials else 32)
    per_worker = worker_share(elems, workers)
    base = ZERO_WORKER_BASE_HALF if half_partials else ZERO_WORKER_BASE_FLOAT
    saving = ZERO_RETENTION_SAVING_HALF if half_partials else ZERO_RETENTION_SAVING_FLOAT
    return (-(-per_worker // width) + base - saving) * workers * vertex_groups


def slic_cycles(group_groups, sub_kernels, field, row, stride, workers: int, chains: int,
                groups_per_group: int, half_partials: bool):
    """One tile's SLIC vertex (grouped/depthwise, 1x4 kernel windows, one channel per group),
    half inputs: ``group_groups`` groups of ``groups_per_group`` conv groups on the tile,
    ``sub_kernels`` 1x4 windows covering the kernel (ceil(kw / 4) x kh)."""
    passes = 1 if chains == 4 else 2
    half8 = chains == 2 and half_partials

    def row_cycles(n, zeroing: bool):
        if stride == 1:
            long = 15 + (n - 5) + (3 if half8 and not zeroing else 0)
            short = 10 + np.where(n > 1, n, 0) + 3 if zeroing else 7 + np.where(n == 1, 6, 10 + n)
            cycles = np.where(n >= (6 if half8 else 5), long, short)
        else:
            cycles = np.where(n >= 3, 15 + 2 * (n - 3), 7 + np.where(n == 1, 3, 5) + 3)
        cycles = cycles - (0 if half_partials else 1)
        entry = (9 if half8 else 10) + (1 if zeroing else 0) + (0 if half_partials else 3)
        return entry + cycles * passes

    def busiest(zeroing: bool):
        per_worker = []
        for elems, entries in worker_rows(field, row, workers):
            n = np.round(np.where(entries > 0, elems / np.maximum(entries, 1), 0))
            per_worker.append(entries * row_cycles(n, zeroing))
        return np.maximum.reduce(per_worker)

    preamble = SLIC_WORKER_PREAMBLE + (1 if half8 else 0) + (4 if groups_per_group > 4 else 0)
    zero_pass = workers * (preamble + busiest(True)) + (2 + 2 * np.asarray(field) if half8 else 0)
    later_pass = workers * (preamble + busiest(False))
    per_worker_load = SLIC_WEIGHT_LOAD_PER_WORKER if groups_per_group > 4 else SLIC_WEIGHT_LOAD_PER_WORKER - 1
    weight_load = 9 + 6 + per_worker_load * workers + 6 + 16
    if groups_per_group > 4:
        strides = groups_per_group // 4
        stride_loop = (weight_load + 6 + 1 + 6 + 2 + 6) * strides + SLIC_BRNZDEC_STALL * (strides - 1) + 1
        sub_kernel_body = stride_loop + 2 + 8 + 3 + 2
        group_body = 15 + 8
        later_pass = later_pass * strides  # as poplibs: only the non-zeroing passes scale with the strides
    else:
        sub_kernel_body = weight_load + 3 + 2 + 1 + 6 + 1 + 6 + 1
        group_body = 15
    return (SLIC_SUPERVISOR_PREAMBLE + group_body * group_groups + SLIC_BRNZDEC_STALL * (group_groups - 1) + 1
            + sub_kernel_body * sub_kernels + SLIC_BRNZDEC_STALL * (sub_kernels - 1) + 1
            + group_groups * zero_pass + group_groups * (sub_kernels - 1) * later_pass)


@functools.lru_cache(maxsize=None)
def reduce_stage_depths(depth: int) -> tuple[int, ...]:
    """Partials each stage of a cross-tile reduction of ``depth`` partials sums (ConvReducePlan.cpp).

    One stage below 16 partials, two below 125, three from there on (enableMultiStageReduce is
    on by default, ConvOptions.hpp); the intermediate depths minimise the messages per tile.
    """
    if depth <= 1:
        return ()
    stages = 1 if depth < 16 else 2 if depth < 125 else 3
    intermediate = _intermediate_depths(depth, stages)[0]
    out, remaining = [], depth
    for d in intermediate:
        this = -(-remaining // d)
        out.append(this)
        remaining = -(-remaining // this)
    if remaining > 1:
        out.append(remaining)
    return tuple(out)


def _intermediate_depths(depth: int, stages: int) -> tuple[list[int], float]:
    if stages == 1:
        return [], float(depth)
    down = int(depth ** ((stages - 1.0) / stages))
    best: tuple[list[int], float] | None = None
    for nxt in (down, down + 1):
        rest, cost = _intermediate_depths(nxt, stages - 1)
        cost += depth / nxt
        if best is None or cost < best[1]:
            best = ([nxt] + rest, cost)
    return best


def reduce_cycles(outputs, depth, workers: int, float_partials: bool, float_output):
    """A reduction vertex summing ``depth`` partials into each of ``outputs`` elements
    (getReduceCycleEstimate, the multi-input path; the fast single-input path needs
    enableFastReduce, off by default). ``depth`` and ``float_output`` may be arrays (one per plan);
    a depth of 1 or less reduces nothing."""
    outputs = np.asarray(outputs, dtype=float)
    depth = np.asarray(depth)
    acc_width = 4 if float_partials else 8
    in_path = DATA_PATH_BITS // (32 if float_partials else 16)
    per_loop = acc_width // min(acc_width, in_path) + 1
    per_worker = -(-np.ceil(outputs / acc_width) // workers)
    overhead = np.where(float_output, REDUCE_OUTER_OVERHEAD[(True, float_partials)],
                        REDUCE_OUTER_OVERHEAD[(False, float_partials)])
    return np.where(depth > 1, (REDUCE_BASE + (per_loop * depth + overhead) * per_worker) * workers, 0.0)
