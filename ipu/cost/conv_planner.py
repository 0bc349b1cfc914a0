"""Plan a convolution or matrix product over an IPU's tiles, the way Poplar's planner does.

poplibs' planner (``lib/poplin/ConvPlan.cpp``, ``ConvModel.cpp``) partitions a convolution
over the tiles along its conv groups, field (batch x rows, columns), input channels and
output channels; each tile runs one vertex on its share; partial sums split over input
channels are reduced across tiles afterwards. It scores every partition as exchange + vertex
+ reduction + layout-transform cycles and keeps the cheapest whose temporary memory fits in
the available-memory proportion of a tile. ``plan_conv`` does the same over every integer split of
every dimension, as poplibs (``integer_splits``), scored at once with numpy with the vertex
estimates of ``ipu.cost.vertices``.

A training step runs three planned operations per layer (``conv_passes``): forward, the input
gradient (``bwd``: the convolution of the output gradient with the transposed, flipped
weights) and the weight gradient (``wu``: a matrix product over batch x output positions,
as poplibs turns it into one by moving those dimensions into the input channels).

Not modelled (labelled in ``docs/ipu.md``): serial splits other than of the output channels, splits of the kernel, the planner's
own choice among layout transforms (each pass gets the rearrangements poplibs charges it by
default), and stride > 1 in the input-gradient pass (its field is the forward output's).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ipu.cost import bsp
from ipu.cost import vertices as V
from ipu.cost.assumptions import Assumptions
from ipu.specs import IpuSpec
from models.profile import ConvShape

TRANSFORM_FACTOR = 5 / 4  # ConvModel.cpp getScaleFactorForTransform: copy cycles x 5/4
INTER_TILE_PARTIAL_BYTES = 4  # ConvOptions.hpp: interTilePartialsType defaults to FLOAT


@dataclass(frozen=True)
class ConvProblem:
    """One planned operation: ``groups`` x (``field`` output elements, reduced over
    ``in_chans`` x ``kernel`` positions, into ``out_chans``) per group."""

    pass_name: str  # "fwd", "bwd" or "wu"
    groups: int
    rows: int  # batch x output rows (wu: input channels per group)
    cols: int  # output columns (wu: kernel positions)
    kernel: tuple[int, int]  # positions the vertex loops over (wu: 1 x 1)
    in_chans: int  # per group, reduced by the matrix unit (wu: batch x output positions)
    out_chans: int  # per group
    stride: int
    image_rows: int  # output rows of one image (fwd/bwd), for the halo of a row split
    input_rows: int  # input rows of one image
    input_cols: int
    rearrange: tuple[bool, bool, bool]  # input, weights, output need a layout change first
    input_per_output: int = 1  # wu: input pixels behind one output position (stride**2, kernel > 1)
    input_dilation: int = 1  # bwd of a strided conv: the output gradient dilated by the stride (zeros between)

    @property
    def macs(self) -> int:
        return self.groups * self.rows * self.cols * self.kernel[0] * self.kernel[1] * self.in_chans * self.out_chans


@dataclass(frozen=True)
class ConvPlan:
    """The chosen partition of one pass and what it costs one tile (cycles)."""

    problem: ConvProblem
    method: str
    splits: dict[str, int]  # groups, rows, cols, in, out (parallel), serial (output-channel iterations)
    tiles_used: int
    matrix_cycles: float  # the conv vertex
    vector_cycles: float  # reductions, layout copies, casts
    exchange_cycles: float
    exchange_bytes: float  # received by the busiest tile
    compute_sets: int
    temp_bytes: float

    @property
    def cycles(self) -> float:
        return self.matrix_cycles + self.vector_cycles + self.exchange_cycles

    def describe(self) -> str:
        s = self.splits
        serial = f" x{s['serial']} serial" if s.get("serial", 1) > 1 else ""
        return (f"{self.method} g{s['groups']}/f{s['rows']}x{s['cols']}/i{s['in']}/o{s['out']}{serial} "
                f"on {self.tiles_used} tiles")


def conv_passes(shape: ConvShape, training: bool = True) -> list[ConvProblem]:
    """The forward, input-gradient and weight-gradient operations of one layer."""
    g = shape.groups
    ci, co = shape.in_channels // g, shape.out_channels // g
    (h, w), (ho, wo), (kh, kw) = shape.in_hw, shape.out_size, shape.kernel
    n, s = shape.batch, shape.stride
    fwd = ConvProblem("fwd", g, n * ho, wo, (kh, kw), ci, co, s, ho, h, w, (False, False, False))
    if not training:
        return [fwd]
    if s > 1 and kh * kw > 1:  # the field is the forward's input; the output gradient is dilated by s
        bwd = ConvProblem("bwd", g, n * h, w, (kh, kw), co, ci, 1, h, h, w, (False, True, False), input_dilation=s)
    else:  # a 1x1 strided kernel: computed on the undilated gradient, the result dilated (dilatePostConv)
        bwd = ConvProblem("bwd", g, n * ho, wo, (kh, kw), co, ci, 1, ho, ho, wo, (False, True, False))
    behind = s * s if kh * kw > 1 else 1
    wu = ConvProblem("wu", g, ci, kh * kw, (1, 1), n * ho * wo, co, 1, ci, ci, kh * kw, (True, True, False), behind)
    return [fwd, bwd, wu]


@functools.lru_cache(maxsize=256)
def integer_splits(limits: tuple[int, ...], tiles: int) -> np.ndarray:
    """Every split of the planner's dimensions: one row per tuple (s_1, ..., s_k) of integers
    with 1 <= s_j <= limits[j] and s_1 x ... x s_k <= tiles, as poplibs' planner searches them
    (``ConvModel.cpp`` declares each level's split ``m.addVariable(1, levelMaxSplit)`` and constrains
    the product to the tiles). Built dimension by dimension over the sorted partial products, so
    the work is the size of the answer; read-only (cached)."""
    splits = np.ones((1, 0), dtype=np.int64)
    products = np.ones(1, dtype=np.int64)
    for limit in limits:
        order = np.argsort(products, kind="stable")
        splits, products = splits[order], products[order]
        parts, part_products = [], []
        for value in range(1, min(limit, tiles) + 1):
            keep = int(np.searchsorted(products, tiles // value, side="right"))
            if keep == 0:
                break
            parts.append(np.column_stack([splits[:keep], np.full(keep, value, dtype=np.int64)]))
            part_products.append(products[:keep] * value)
        splits, products = np.concatenate(parts), np.concatenate(part_products)
    splits.setflags(write=False)
    return splits


@dataclass(frozen=True)
class _Vertex:
    method: str
    in_group: int  # input channels per group of the vertex
    out_group: int  # output channels per group (conv units, or 1 for SLIC)
    group_combine: int  # conv groups merged into the channels (AMP on small groups)
    filter_height: int  # kernel rows the units process at once (in_group < weights per unit)


def _vertices(p: ConvProblem, spec: IpuSpec, half: bool, half_partials: bool) -> list[_Vertex]:
    units = spec.conv_units(half, half_partials)
    per_unit = 4 * spec.conv_load_elems(half)  # weights per conv unit: chain of 4 x load elements
    out = []
    in_group = per_unit  # fewer channels fill a unit with 2 or 4 kernel rows (nx1 vertex heights 1, 2, 4)
    while in_group > per_unit // 4 and in_group // 2 >= p.in_chans:
        in_group //= 2
    height = per_unit // in_group
    out.append(_Vertex("AMP", in_group, units, 1, height))
    small = max(p.in_chans, p.out_chans)
    if p.groups > 1 and small < per_unit:
        factor = min(per_unit // small, p.groups)
        out.append(_Vertex("AMP+combined groups", per_unit, units, factor, 1))
    if (half and p.in_chans == 1 and p.out_chans == 1 and p.pass_name != "wu" and p.stride <= 2):
        out.append(_Vertex("SLIC", 1, 1, 16 if units == 16 else 4, 1))
    return out


@functools.lru_cache(maxsize=4096)
def plan_conv(problem: ConvProblem, spec: IpuSpec, tiles: int, amp: float, half: bool, half_partials: bool,
              assumptions: Assumptions) -> ConvPlan:
    """The cheapest partition of ``problem`` over ``tiles`` tiles whose temporaries fit in
    ``amp`` x tile memory (the least-memory plan if none fits); ``assumptions`` gives a compute
    set's fixed cycles and the on-tile copy rate."""
    plans = [_best_partition(problem, v, spec, tiles, amp, half, half_partials, assumptions)
             for v in _vertices(problem, spec, half, half_partials)]
    budget = amp * spec.memory_per_tile
    return min(plans, key=lambda plan: (plan.temp_bytes > budget, plan.cycles if plan.temp_bytes <= budget
                                        else plan.temp_bytes))


def _best_partition(p: ConvProblem, v: _Vertex, spec: IpuSpec, tiles: int, amp: float, half: bool,
                    half_partials: bool, assumptions: Assumptions) -> ConvPlan:
    """The cheapest partition with this vertex. Serial splits of the output channels (the tile
    runs its share in ``serial`` iterations, holding 1/serial of the weights and partials at a
    time, one compute set each) are tried only when the cheapest parallel plan does not fit."""
    budget = amp * spec.memory_per_tile
    grid = _grid(p, v, tiles)
    scored = [_score(p, v, spec, grid, half, half_partials, 1, assumptions)]
    cheapest = int(np.argmin(scored[0]["cost"]))
    if scored[0]["temp"][cheapest] > budget:
        scored += [_score(p, v, spec, grid, half, half_partials, k, assumptions) for k in SERIAL_SPLITS]
    best_cost, best = np.inf, None
    for sc in scored:
        cost = np.where(sc["temp"] <= budget, sc["cost"], np.inf)
        i = int(np.argmin(cost))
        if cost[i] < best_cost:
            best_cost, best = cost[i], (sc, i)
    if best is None:  # nothing fits: the least memory
        sc = min(scored, key=lambda sc: sc["temp"].min())
        best = (sc, int(np.argmin(sc["temp"])))
    sc, i = best
    splits = {k: int(grid[k][i]) for k in ("groups", "rows", "cols", "in", "out")} | {"serial": sc["serial"]}
    return ConvPlan(p, v.method, splits, int(grid["used"][i]), float(sc["matrix"][i]), float(sc["vector"][i]),
                    float(sc["exchange"][i]), float(sc["bytes"][i]), int(sc["sets"][i]), float(sc["temp"][i]))


SERIAL_SPLITS = (2, 4, 8, 16)


def _grid(p: ConvProblem, v: _Vertex, tiles: int) -> dict[str, np.ndarray]:
    """Every integer partition of ``p`` over at most ``tiles`` tiles with vertex ``v``."""
    n_groups, in_grains, out_grains = _grains(p, v)
    limits = (n_groups, p.rows, p.cols, in_grains if v.method != "SLIC" else 1, out_grains)
    return grid_for(p, v, integer_splits(limits, tiles))


def _grains(p: ConvProblem, v: _Vertex) -> tuple[int, int, int]:
    """Conv groups (of the vertex's grouping), input and output channel groups to split."""
    grain = v.group_combine if v.method == "SLIC" else 1  # SLIC: conv groups per vertex group
    n_groups = -(-(-(-p.groups // v.group_combine)) // grain)
    return (n_groups, -(-p.in_chans * v.group_combine // v.in_group),
            -(-p.out_chans * v.group_combine // v.out_group))


def grid_for(p: ConvProblem, v: _Vertex, splits: np.ndarray) -> dict[str, np.ndarray]:
    """The partitions ``splits`` (rows of groups, rows, cols, in, out) with each tile's share."""
    n_groups, in_grains, out_grains = _grains(p, v)
    grid = {k: splits[:, j] for j, k in enumerate(("groups", "rows", "cols", "in", "out"))}
    grid["used"] = grid["groups"] * grid["rows"] * grid["cols"] * grid["in"] * grid["out"]
    grid.update(g_t=-(-n_groups // grid["groups"]), rows_t=-(-p.rows // grid["rows"]),
                cols_t=-(-p.cols // grid["cols"]), ig_t=-(-in_grains // grid["in"]),
                og_t=-(-out_grains // grid["out"]))
    return grid


def _per_distinct(function, *arrays: np.ndarray):
    """``function(*arrays)`` evaluated once per distinct tuple of values and spread back: a vertex's
    cycles depend only on the tile's share of each dimension, a reduction only on its partials and
    depth, and many integer splits give the same. ``function`` returns an array or a tuple of arrays."""
    radices = [int(np.max(a)) + 1 for a in arrays]
    key = np.zeros(len(arrays[0]), dtype=np.int64)
    if math.prod(radices) < 2**62:  # one integer per tuple of values (mixed radix)
        for values, radix in zip(arrays, radices):
            key = key * radix + values
    else:  # the codes of each array's distinct values instead
        for values in arrays:
            distinct, code = np.unique(values, return_inverse=True)
            key = key * len(distinct) + code.ravel()
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    out = function(*(np.asarray(a)[first] for a in arrays))
    inverse = inverse.ravel()
    if isinstance(out, tuple):
        return tuple(np.asarray(o)[inverse] for o in out)
    return np.asarray(out, dtype=float)[inverse]


def _vertex_cycles(p: ConvProblem, v: _Vertex, spec: IpuSpec, g_t, ig_t, og_iter, rows_t, cols_t, half: bool,
                   half_partials: bool):
    """The conv vertex one tile runs for its share (arrays of shares)."""
    workers, units = spec.threads_per_tile, spec.conv_units(half, half_partials)
    kh, kw = p.kernel
    field = rows_t * cols_t
    if v.method == "SLIC":
        return V.slic_cycles(g_t, -(-kw // V.SLIC_WINDOW) * kh, field, cols_t, p.stride, workers,
                             4 if units == 16 else 2, v.group_combine, half_partials)
    passes = max(v.out_group // units, 1)
    if kh == kw == 1 and p.stride == 1:
        return V.amp_1x1_cycles(g_t, ig_t, og_iter, passes, field, workers, units, half, half_partials,
                                spec.coeff_load_bytes_per_cycle)
    d = p.input_dilation  # each kernel position reaches every d-th row and column of the field; all are zeroed
    active_cols = -(-cols_t // d)
    return V.amp_nx1_cycles(g_t, ig_t, og_iter, passes, -(-kh // v.filter_height), kw,
                            -(-rows_t // d) * active_cols, active_cols, workers, units, half, half_partials,
                            spec.coeff_load_bytes_per_cycle, v.filter_height, zero_field=field)


def _score(p: ConvProblem, v: _Vertex, spec: IpuSpec, grid: dict, half: bool, half_partials: bool,
           serial: int, assumptions: Assumptions) -> dict:
    """Cycles, bytes and temporary memory of every partition in ``grid`` (arrays)."""
    slic = v.method == "SLIC"
    in_chans, out_chans = p.in_chans * v.group_combine, p.out_chans * v.group_combine
    g_t, rows_t, cols_t, ig_t = grid["g_t"], grid["rows_t"], grid["cols_t"], grid["ig_t"]
    og_iter = -(-grid["og_t"] // serial)  # output groups per serial iteration
    field = rows_t * cols_t
    workers = spec.threads_per_tile
    kh, kw = p.kernel
    matrix = _per_distinct(lambda g, ig, og, rows, cols: _vertex_cycles(p, v, spec, g, ig, og, rows, cols, half,
                                                                       half_partials),
                           g_t, ig_t, og_iter, rows_t, cols_t)
    if slic:
        channels_in = channels_out = g_t * v.group_combine
        weights = channels_in * kh * kw
    else:
        channels_in = g_t * np.minimum(ig_t * v.in_group, in_chans)
        channels_out = g_t * np.minimum(og_iter * v.out_group, out_chans)
        weights = channels_in * np.minimum(og_iter * v.out_group, out_chans) * kh * kw
    act_bytes = 2 if half else 4
    inputs = channels_in * _input_area(p, rows_t, cols_t, materialised=slic)
    partials = field * channels_out
    o_s, i_s = grid["out"], grid["in"]
    bus = np.where(o_s % spec.tiles_per_exchange_bus == 0, spec.tiles_per_exchange_bus, 1)
    in_bytes = (inputs - inputs // o_s) * act_bytes  # 1 / o_s of the inputs is already on the tile
    w_bytes = (weights - weights // (grid["rows"] * grid["cols"])) * act_bytes * serial
    exchange = np.ceil(in_bytes / (spec.exchange_bytes_per_cycle * bus)) + np.ceil(
        w_bytes / spec.exchange_bytes_per_cycle)
    reduce, reduce_x, reduce_bytes, stages, reduce_temp = _per_distinct(
        lambda parts, depth: _reduction(parts, depth, workers, half), partials, i_s)
    # combining conv groups (poplibs' combineConvGroups transform) re-lays out all three operands
    rearrange = (True, True, True) if v.group_combine > 1 and not slic else p.rearrange
    copies, copy_x, copy_bytes, copy_sets = _transforms(p, rearrange, spec, grid["used"], act_bytes,
                                                         assumptions.memcpy_bytes_per_cycle)
    sets = serial * (1 + stages) + copy_sets
    per_set = bsp.superstep_fixed_cycles(assumptions) * (serial - 1) * (1 + stages)  # the extra iterations' sets
    return {
        "serial": serial,
        "matrix": matrix * serial,
        "vector": (reduce * serial + copies),
        "exchange": exchange + reduce_x * serial + copy_x,
        "bytes": in_bytes + w_bytes + reduce_bytes * serial + copy_bytes,
        "sets": sets,
        "temp": (inputs + weights) * act_bytes + partials * (2 if half_partials else 4) + reduce_temp,
        "cost": matrix * serial + reduce * serial + copies + exchange + reduce_x * serial + copy_x + per_set,
    }


def _input_area(p: ConvProblem, rows_t, cols_t, materialised: bool = False):
    """Input elements per input channel a tile needs for its rows and columns (with the halo). A
    dilated input counts its zeros where the vertex reads them (``materialised``: SLIC), else only
    its values (the AMP vertex's worklists skip the zeros)."""
    if p.pass_name == "wu":  # per reduction element: the tile's weight rows x the pixels behind it
        return rows_t * p.input_per_output
    kh, kw = p.kernel
    step_h, step_w = min(p.stride, kh), min(p.stride, kw)  # a stride above the kernel skips pixels
    images = -(-rows_t // p.image_rows)
    image_rows = min((p.image_rows - 1) * step_h + kh, p.input_rows)
    partial_rows = np.minimum((rows_t - 1) * step_h + kh, image_rows)
    in_rows = np.where(rows_t >= p.image_rows, images * image_rows, partial_rows)
    in_cols = np.minimum((cols_t - 1) * step_w + kw, p.input_cols)
    d = 1 if materialised else p.input_dilation
    return -(-in_rows // d) * -(-in_cols // d)


MAX_REDUCE_STAGES = 3  # vertices.reduce_stage_depths plans at most three stages


def _reduction(partials, depth, workers: int, half: bool):
    """Cross-tile reduction of partial sums split over ``depth`` tiles (arrays, one per plan):
    the exchange of float partials, then one reduction vertex per stage of
    ``vertices.reduce_stage_depths`` (computed for every plan at once, stage by stage)."""
    depth = np.asarray(depth)
    values, inverse = np.unique(depth, return_inverse=True)
    inverse = inverse.ravel()
    plans = [V.reduce_stage_depths(int(d)) for d in values]
    stage_of = np.array([[*plan, *(1,) * (MAX_REDUCE_STAGES - len(plan))] for plan in plans])[inverse]
    stages = np.array([len(plan) for plan in plans])[inverse]
    split = depth > 1
    outputs = -(-partials // depth)  # each of the depth tiles reduces 1/depth of the outputs
    first = np.where(split, partials * INTER_TILE_PARTIAL_BYTES, 0)
    exchange, nbytes, temp = np.ceil(first / 4), first.astype(float), first.astype(float)
    reduce = np.zeros(len(depth))
    remaining = depth
    for k in range(MAX_REDUCE_STAGES):
        active = stages > k
        remaining = -(-remaining // stage_of[:, k])
        last = stages == k + 1
        results = outputs * remaining
        reduce += np.where(active, V.reduce_cycles(results, stage_of[:, k], workers, True, ~last | (not half)), 0)
        later = active & ~last
        exchange += np.where(later, np.ceil(results * INTER_TILE_PARTIAL_BYTES / 4), 0)
        nbytes += np.where(later, results * INTER_TILE_PARTIAL_BYTES, 0)
    return reduce, exchange, nbytes, stages, temp


def _transforms(p: ConvProblem, rearrange: tuple[bool, bool, bool], spec: IpuSpec, used, act_bytes: int,
                memcpy_bytes_per_cycle: int):
    """Layout changes before (input, weights) and after (output) the vertex, over the tiles used:
    an exchange and an on-tile copy of each rearranged operand (ConvModel.cpp addTransformCycleEstimate)
    at ``memcpy_bytes_per_cycle`` (an assumption)."""
    if p.pass_name == "wu":
        volumes = (p.groups * p.rows * p.in_chans * p.input_per_output, p.groups * p.in_chans * p.out_chans,
                   p.groups * p.rows * p.cols * p.out_chans)
    else:
        images, d = p.rows // p.image_rows, p.input_dilation
        volumes = (p.groups * p.in_chans * images * -(-p.input_rows // d) * -(-p.input_cols // d),
                   p.groups * p.in_chans * p.out_chans * p.kernel[0] * p.kernel[1],
                   p.groups * p.rows * p.cols * p.out_chans)
    copies, exchange, nbytes = np.zeros(len(used)), np.zeros(len(used)), np.zeros(len(used))
    sets = 0
    for needed, elems in zip(rearrange, volumes):
        if needed:
            per_tile = np.ceil(elems * act_bytes / used)
            copies += np.ceil(per_tile * TRANSFORM_FACTOR / min(memcpy_bytes_per_cycle, act_bytes))
            exchange += np.ceil(per_tile / spec.exchange_bytes_per_cycle)
            nbytes += per_tile
            sets += 1
    return copies, exchange, nbytes, sets
