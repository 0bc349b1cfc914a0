"""The convolution planner: hand-computed single-tile plans, bounds and monotonicity."""

import pytest

from ipu.cost import vertices as V
from ipu.cost.assumptions import DEFAULT
from ipu.cost.conv_planner import conv_passes, plan_conv
from ipu.specs import BOW, MK1_GC2, MK2_GC200
from models.profile import ConvShape

MK2 = MK2_GC200.tile_view
SHAPES = {
    "g16 3x3": ConvShape(3, (48, 48), 224, 224, (3, 3), 1, 14),
    "1x1 expand": ConvShape(3, (48, 48), 56, 224),
    "stem 3x3/2": ConvShape(3, (96, 96), 3, 48, (3, 3), 2),
    "depthwise 5x5": ConvShape(3, (24, 24), 192, 192, (5, 5), 1, 192),
    "dense": ConvShape(3, (1, 1), 1792, 1000),
}


def test_single_tile_conv_is_the_nx1_vertex_by_hand():
    # one tile: no split, no exchange, no reduction -- the plan is the vertex (see test_vertices)
    fwd = conv_passes(ConvShape(1, (20, 30), 16, 16, (3, 3)))[0]
    plan = plan_conv(fwd, MK2, 1, 0.6, True, True, DEFAULT)
    assert plan.method == "AMP" and plan.tiles_used == 1 and plan.compute_sets == 1
    assert plan.matrix_cycles == 26109 + 888 + 286 + 2430
    assert plan.exchange_cycles == 0 and plan.vector_cycles == 0


def test_single_tile_matmul_is_the_1x1_vertex_by_hand():
    # [4 x 64] @ [64 x 32]: 4 outputs, 4 input groups of 16, 2 output groups of 16 units.
    # worker of 1 element: 32 - 7 = 25 (zeroing), 33 - 7 = 26; the idle worker 14 and 15:
    # tile max(150, 98) = 150 and max(156, 104) = 156; supervisor 50 + 6 x (7 + 3 x 3) = 146,
    # + 13 + 3 x (15 + 2 x (19 + 6 + 64 + 156)) + 11 + 2 x (18 + 7 + 64 + 150) = 2017.
    fwd = conv_passes(ConvShape(4, (1, 1), 64, 32))[0]
    plan = plan_conv(fwd, MK2, 1, 0.6, True, True, DEFAULT)
    assert plan.matrix_cycles == 146 + 2017
    assert plan.matrix_cycles == V.amp_1x1_cycles(1, 4, 2, 1, 4, 6, 16, True, True, 16)


def test_the_three_passes_of_a_layer():
    fwd, bwd, wu = conv_passes(SHAPES["g16 3x3"])
    assert fwd.macs == bwd.macs == wu.macs == SHAPES["g16 3x3"].macs
    assert (bwd.in_chans, bwd.out_chans) == (fwd.out_chans, fwd.in_chans)
    assert wu.in_chans == 3 * 48 * 48 and wu.kernel == (1, 1) and wu.rearrange[:2] == (True, True)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_plans_respect_tiles_and_the_matrix_units_peak(name):
    for problem in conv_passes(SHAPES[name]):
        plan = plan_conv(problem, MK2, 1440, 0.6, True, True, DEFAULT)
        assert 1 <= plan.tiles_used <= 1440
        assert plan.cycles * 1440 * 64 >= problem.macs  # no plan beats 64 MACs per tile per cycle
        assert plan.temp_bytes <= 0.6 * MK2.memory_per_tile


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_more_tiles_are_never_slower(name):
    for problem in conv_passes(SHAPES[name]):
        cycles = [plan_conv(problem, MK2, t, 0.6, True, True, DEFAULT).cycles for t in (16, 64, 256, 1024, 1440, 1472)]
        assert cycles == sorted(cycles, reverse=True), (problem.pass_name, cycles)


def test_less_available_memory_is_never_faster():
    problem = conv_passes(ConvShape(4, (56, 56), 256, 256, (3, 3)))[0]
    cycles = [plan_conv(problem, MK2, 64, amp, True, True, DEFAULT).cycles for amp in (0.6, 0.3, 0.1, 0.05)]
    assert cycles == sorted(cycles)


def test_vertex_choice_follows_the_channels():
    g16 = plan_conv(conv_passes(SHAPES["g16 3x3"])[0], MK2, 1440, 0.6, True, True, DEFAULT)
    depthwise = plan_conv(conv_passes(SHAPES["depthwise 5x5"])[0], MK2, 1440, 0.6, True, True, DEFAULT)
    float_dw = plan_conv(conv_passes(SHAPES["depthwise 5x5"])[0], MK2, 1440, 0.6, False, False, DEFAULT)
    assert g16.method == "AMP"  # 16 channels per group fill a conv unit
    assert depthwise.method in ("SLIC", "AMP+combined groups")  # never one channel per AMP group
    assert float_dw.method == "AMP+combined groups"  # no float SLIC vertex


def test_mk1_half_units_are_half_as_fast_as_mk2_on_big_work():
    problem = conv_passes(ConvShape(16, (28, 28), 256, 256))[0]
    mk1 = plan_conv(problem, MK1_GC2.tile_view, 1, 1.0, True, True, DEFAULT).matrix_cycles
    mk2 = plan_conv(problem, MK2, 1, 1.0, True, True, DEFAULT).matrix_cycles
    assert 1.6 < mk1 / mk2 <= 2.0  # 8 conv units against 16


def test_mk2_and_bow_plan_alike():
    problem = conv_passes(SHAPES["1x1 expand"])[2]
    bow = plan_conv(problem, BOW.tile_view, 1440, 0.6, True, True, DEFAULT)
    assert bow is plan_conv(problem, MK2, 1440, 0.6, True, True, DEFAULT)


def test_integer_splits_are_every_tuple_within_the_tiles():
    from ipu.cost.conv_planner import integer_splits

    got = {tuple(row) for row in integer_splits((3, 5, 2), 6).tolist()}
    expected = {(a, b, c) for a in range(1, 4) for b in range(1, 6) for c in range(1, 3) if a * b * c <= 6}
    assert got == expected and len(integer_splits((3, 5, 2), 6)) == len(expected) == 15


SMALL = {  # small enough to enumerate every split by hand
    "3x3 conv": ConvShape(2, (6, 7), 32, 48, (3, 3)),
    "1x1 conv": ConvShape(3, (5, 5), 48, 32),
    "grouped": ConvShape(2, (6, 6), 64, 64, (3, 3), 1, 4),
}


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("tiles", [7, 12])
def test_the_search_finds_the_split_a_brute_force_enumeration_finds(name, tiles):
    import itertools

    import numpy as np

    from ipu.cost import conv_planner as CP

    def cost(problem, vertex, split):  # one partition scored on its own
        score = CP._score(problem, vertex, MK2, CP.grid_for(problem, vertex, np.array([split])), True, True, 1,
                          DEFAULT)
        return score["cost"][0], score["temp"][0]

    for problem in conv_passes(SMALL[name]):
        plan = plan_conv(problem, MK2, tiles, 0.6, True, True, DEFAULT)
        vertex = next(v for v in CP._vertices(problem, MK2, True, True) if v.method == plan.method)
        groups, in_grains, out_grains = CP._grains(problem, vertex)
        limits = (groups, problem.rows, problem.cols, in_grains if vertex.method != "SLIC" else 1, out_grains)
        fitting = [(cost(problem, vertex, split)[0], split)
                   for split in itertools.product(*(range(1, n + 1) for n in limits))  # every split by hand
                   if np.prod(split) <= tiles and cost(problem, vertex, split)[1] <= 0.6 * MK2.memory_per_tile]
        best_cost, best = min(fitting)
        chosen = tuple(plan.splits[k] for k in ("groups", "rows", "cols", "in", "out"))
        assert plan.splits["serial"] == 1
        assert cost(problem, vertex, chosen)[0] == best_cost, (problem.pass_name, chosen, best)
