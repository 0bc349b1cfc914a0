"""Vertex cycle estimates pinned to the poplibs formulas worked through by hand."""

import pytest

from ipu.cost import vertices as V


def test_worker_split_is_poplibs_contiguous_partition():
    # 100 elements on rows of 30 over 6 workers: [0,16) [16,33) [33,50) [50,66) [66,83) [83,100)
    split = [(int(e), int(n)) for e, n in V.worker_rows(100, 30, 6)]
    assert split == [(16, 1), (17, 2), (17, 1), (16, 2), (17, 1), (17, 2)]


def test_amp_1x1_vertex_by_hand():
    # 600 outputs, one group of 16 in x 16 out channels, Mk2 half/half (16 units):
    # worker 100 elements: zeroing 37 + 4 x 97 - 7 = 418, else 38 + 388 - 7 = 419;
    # tile: max(6 x 418, 6 x 418 + 14) = 2522 and 2528; weights load 16 x 32 / 8 = 64;
    # supervisor 50 + 6 x 7 + (13 + (11 + (18 + (7 + 64 + 2522)))) = 2727
    assert V.amp_1x1_cycles(1, 1, 1, 1, 600, 6, 16, True, True, 16) == 2727


def test_amp_nx1_vertex_by_hand():
    # 3x3 kernel, 600 outputs in rows of 30: each worker holds 100 elements in 4 row pieces of 25
    # on average: 4 x (3 + 34 + 4 x 22 - 9) + 17 + 1 = 482; per kernel position max(6 x 482,
    # 6 x 482 + 9) = 2901, x 9 positions = 26109; supervisor loop 3 x (14 + 3 x (12 + 64 + 15 + 3))
    # = 888; outer 109 + 6 x 9 + 6 x 10 + 18 + 1 + 16 + 14 + 14 = 286; zeroing 9600 partials:
    # (1600 / 4 + 15 - 10) x 6 = 2430.
    assert V.amp_nx1_cycles(1, 1, 1, 1, 3, 3, 600, 30, 6, 16, True, True, 16) == 26109 + 888 + 286 + 2430


def test_amp_rate_approaches_the_units_peak_on_large_work():
    field, groups = 60_000, 4
    cycles = V.amp_1x1_cycles(1, groups, 4, 1, field, 6, 16, True, True, 16)
    macs = field * (groups * 16) * (4 * 16)
    assert 0.8 < macs / (64 * cycles) <= 1.0  # 16 units x 4 half MACs per cycle at best


def test_reduce_plan_stages():
    assert V.reduce_stage_depths(1) == ()
    assert V.reduce_stage_depths(8) == (8,)  # one stage below 16
    assert V.reduce_stage_depths(100) == (10, 10)  # two below 125, sqrt split
    three = V.reduce_stage_depths(1440)
    assert len(three) == 3 and three[0] * three[1] * three[2] >= 1440


def test_reduce_vertex_by_hand():
    # 64 float outputs from 10 float partials each: 16 accumulator loops over 6 workers -> 3 each;
    # (32 + ((4 / 2 + 1) x 10 + 7) x 3) x 6
    assert V.reduce_cycles(64, 10, 6, True, True) == pytest.approx((32 + (3 * 10 + 7) * 3) * 6)
    assert V.reduce_cycles(64, 1, 6, True, True) == 0


def test_slic_beats_amp_for_depthwise_work():
    # depthwise 3x3 over 16 channels, 600 outputs: SLIC (16 groups, 4 chains) vs AMP with one channel
    slic = V.slic_cycles(1, 3, 600, 30, 1, 6, 4, 16, True)
    amp = V.amp_nx1_cycles(16, 1, 1, 1, 3, 3, 600, 30, 6, 16, True, True, 16)
    assert slic < amp
