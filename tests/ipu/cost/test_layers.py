"""Vector work, compute sets and per-update costs of layers."""

import pytest

from ipu.cost import vectors as VC
from ipu.cost.assumptions import DEFAULT
from ipu.cost.bsp import Cycles, compute_set
from ipu.cost.layers import DeviceContext, layer_cost, workload_for
from ipu.cost.updates import accumulate, optimizer_step, weight_tensors
from ipu.specs import MK2_GC200
from models.profile import ConvShape, LayerProfile

CTX = DeviceContext(MK2_GC200, 1440, 0.6, True, True)


def vector_layer(kind, shape, params=0):
    e = 1
    for d in shape:
        e *= d
    return LayerProfile(kind, "b", kind, 8 * e, 12 * e, params, e, e, False, shape)


def test_a_compute_set_pays_sync_and_exchange():
    c = compute_set(DEFAULT, vector=1000, exchange_bytes=400)
    assert (c.vector, c.exchange, c.sync, c.compute_sets) == (1000, 100 + 100, 90, 1)  # CTCLossPlan.cpp's 90, 100
    assert compute_set(DEFAULT, matrix=5).exchange == 0


def test_elementwise_op_by_hand():
    # 1,440,000 half elements over 1440 tiles: 1000 per tile, 167 per worker = 42 vectors of 4;
    # an add costs 3 cycles per vector: 11 + 6 x (21 + 3 x 42) = 893 cycles, one compute set
    c = VC.elementwise(VC.VectorOp("binary", 1_440_000, True), 1440, 6, DEFAULT)
    assert c.vector == 11 + 6 * (21 + 3 * 42) and c.sync == 90 and c.exchange == 0


def test_small_tensors_keep_128_bytes_per_tile():
    assert VC.tiles_for(1000, 1440, half=True) == 16  # 1000 halves in 64-element (128-byte) pieces
    assert VC.tiles_for(10**7, 1440, half=False) == 1440


def test_reductions_to_few_outputs_take_stages():
    few = VC.reduction(3 * 95 * 95 * 96, 12, 4, 1440, 6, True, DEFAULT)  # group-norm statistics
    one = VC.reduction(3 * 95 * 95 * 96, 1, 1, 1440, 6, True, DEFAULT)  # a tensor's norm
    assert few.compute_sets >= 2 and one.compute_sets == 4  # on tile, then 3 stages over 1440 partials
    assert few.exchange > 0


def test_norm_layer_forward_is_its_statistics_and_passes():
    shape = (3, 48, 48, 96)
    e = 3 * 48 * 48 * 96
    stable = layer_cost(vector_layer("norm", shape, 2 * 96), CTX)
    stats = VC.reduction(e, 12, 4, 1440, 6, True, DEFAULT)
    passes = VC.elementwise(VC.VectorOp("binary", e, True), 1440, 6, DEFAULT)
    assert stable.fwd.compute_sets == 2 * stats.compute_sets + 1 + 5 * passes.compute_sets
    assert stable.bwd.total > stable.fwd.total  # two reduceMany and eight passes
    batch = DeviceContext(MK2_GC200, 1440, 0.6, True, True, workload_for("resnet50"))  # one reduceMany
    single = layer_cost(vector_layer("norm", shape, 2 * 96), batch)
    many = VC.reduction(2 * e, 2 * 96, 2 * 96, 1440, 6, True, DEFAULT)
    assert single.fwd.compute_sets == many.compute_sets + 1 + 4 * passes.compute_sets


def test_swish_costs_more_than_relu():
    layer = vector_layer("act", (3, 48, 48, 96))
    relu = DeviceContext(MK2_GC200, 1440, 0.6, True, True, workload_for("resnet50"))
    assert layer_cost(layer, CTX).fwd.vector > layer_cost(layer, relu).fwd.vector


def test_planned_layer_is_the_sum_of_its_passes_and_the_first_layer_skips_its_input_gradient():
    shape = ConvShape(3, (96, 96), 3, 48, (3, 3), 2)
    layer = LayerProfile("stem", "stem", "conv", 1, 2, 1296, 3 * 48 * 48 * 48, 0, True, (3, 96, 96, 3), shape)
    full, first = layer_cost(layer, CTX), layer_cost(layer, CTX, first=True)
    assert [p.problem.pass_name for p in full.plans] == ["fwd", "bwd", "wu"]
    assert [p.problem.pass_name for p in first.plans] == ["fwd", "wu"]
    assert full.fwd.matrix == pytest.approx(full.plans[0].matrix_cycles)
    assert full.bwd.total > first.bwd.total


def test_weight_tensors_split_layers():
    se = LayerProfile("se", "b", "se", 1, 1, 2 * 96 * 24 + 24 + 96, 1, 1, False, (3, 8, 8, 96))
    norm = vector_layer("norm", (3, 8, 8, 96), 192)
    names = [t.name for t in weight_tensors([se, norm])]
    assert names == ["se.fc1.weight", "se.fc1.bias", "se.fc2.weight", "se.fc2.bias", "norm.weight", "norm.bias"]
    assert [t.skip_lars for t in weight_tensors([norm])] == [True, True]


def test_lars_adds_norms_to_momentum_and_16_16_pays_the_stochastic_stores():
    tensors = weight_tensors([LayerProfile("c", "b", "conv", 1, 1, 64 * 64 * 9, 1, 1, True, (1, 8, 8, 64),
                                           ConvShape(1, (8, 8), 64, 64, (3, 3)))])
    lars = optimizer_step(tensors, CTX, "lars", "16.16")
    momentum = optimizer_step(tensors, CTX, "momentum", "16.16")
    assert lars["lars_norms"].total > 0 == momentum["lars_norms"].total
    assert lars["update"].total > momentum["update"].total
    assert lars["stores"].compute_sets == 2 and optimizer_step(tensors, CTX, "lars", "32.32")["stores"] == Cycles()
    assert accumulate(tensors, CTX, True).compute_sets == 1
