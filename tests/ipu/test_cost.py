import logging
from dataclasses import replace

import pytest
from conftest import toy_layer

from ipu import cost
from ipu.cost import layer_seconds, predict
from ipu.plan import PRESETS, PUBLISHED_HOURS_TO_TRAIN
from ipu.specs import MK2_GC200

PUBLISHED_FACTOR = 4.0  # the model must be within this factor of Graphcore's published time to train


def test_layer_seconds_from_first_principles():
    layer = toy_layer("c", "b", flops=10**9, saved=0)
    sync = (cost.SYNC_CYCLES + cost.VERTEX_OVERHEAD_CYCLES) / 1.33e9
    fc, fx, bc, bx = layer_seconds(layer, MK2_GC200, 1440, half=True, amp=0.6)
    assert fc == pytest.approx(1e9 / (1440 * 128 * 1.33e9 * cost.AMP_EFFICIENCY))
    assert bc == pytest.approx(2 * fc)
    assert fx == pytest.approx(cost.COMPUTE_SETS_FWD * sync)
    assert bx == pytest.approx(cost.COMPUTE_SETS_BWD * sync)
    vector = toy_layer("a", "b", flops=10**9, saved=0, matmul=False)
    assert layer_seconds(vector, MK2_GC200, 1440, half=False, amp=0.6)[0] == pytest.approx(
        1e9 / (1440 * 4 * 1.33e9 * cost.VECTOR_EFFICIENCY))
    slower = layer_seconds(layer, MK2_GC200, 1440, half=True, amp=0.6 / 16)[0]
    assert slower == pytest.approx(2 * fc)  # (1/16) ** 0.25 = 1/2


def test_step_time_is_the_sum_of_the_breakdown(b4_g16):
    p = predict(PRESETS["g16-b4-pod64"], b4_g16)
    assert set(p.breakdown) == {"compute", "exchange_sync", "pipeline_bubble", "host_io", "all_reduce", "weight_update"}
    assert all(v >= 0 for v in p.breakdown.values())
    assert p.images_per_s == pytest.approx(6144 / p.step_time_s)
    assert p.time_to_train_s(10) == pytest.approx(10 * 1_281_167 / p.images_per_s)
    assert p.io_overlapped and p.breakdown["host_io"] == 0.0 < p.host_io_total_s


def test_throughput_scales_with_the_pod(b4_g16):
    rates = [predict(PRESETS[f"g16-b4-pod{n}"], b4_g16).images_per_s for n in (16, 64, 128, 256)]
    assert rates == sorted(rates)
    assert 8 < rates[-1] / rates[0] < 16  # 16x the IPUs, less than 16x the speed


def test_bubble_share_shrinks_with_more_micro_batches(b4_g16):
    def share(name):
        p = predict(PRESETS[name], b4_g16)
        return p.breakdown["pipeline_bubble"] / p.step_time_s
    assert share("g16-b4-pod16") < share("g16-b4-pod256")


def test_eight_bit_io_moves_a_quarter_of_float32_bytes(b4_g16):
    plan = replace(PRESETS["g16-b4-pod16"], precision="32.32", num_io_tiles=0)
    uint8 = predict(plan, b4_g16)
    floats = predict(replace(plan, eight_bit_io=False), b4_g16)
    assert floats.host_io_total_s == pytest.approx(4 * uint8.host_io_total_s)
    assert uint8.breakdown["host_io"] == uint8.host_io_total_s  # no IO tiles: nothing hidden


def test_io_tiles_only_overlap_with_grouped_schedule(b4_g16, caplog):
    plan = replace(PRESETS["g16-b4-pod16"], schedule="interleaved")
    with caplog.at_level(logging.WARNING, logger="ipu.io_tiles"):
        from ipu.memory import fit
        fit(plan, b4_g16)
    assert "will not overlap host IO" in caplog.text
    p = predict(plan, b4_g16)
    assert not p.io_overlapped and p.breakdown["host_io"] == p.host_io_total_s


def test_all_reduce_is_a_ring_over_ipu_links(toy_profile):
    plan = replace(PRESETS["g16-b4-pod16"], pipeline_splits=("block2a",), precision="16.32")
    p = predict(plan, toy_profile)
    ring_bw = 320e9 / 10 * cost.ALLREDUCE_RING_LINKS * cost.LINK_EFFICIENCY
    stage_bytes = (4 + 5) * 4  # stage 1 params (block2a + head) in float32 accumulators
    expected = 2 * 7 / 8 * stage_bytes / ring_bw + 2 * 7 * cost.ALLREDUCE_STEP_LATENCY_S
    assert p.breakdown["all_reduce"] == pytest.approx(expected)
    single = predict(replace(plan, replicas=1, system="POD4"), toy_profile)
    assert single.breakdown["all_reduce"] == 0.0


def test_all_reduce_crosses_gw_links_between_pod64s(b4_g16):
    pod64 = predict(PRESETS["g16-b4-pod64"], b4_g16).breakdown["all_reduce"]
    pod128 = predict(PRESETS["g16-b4-pod128"], b4_g16).breakdown["all_reduce"]
    assert pod128 > pod64


def test_bow_is_faster_than_mk2(b4_g16):
    mk2 = predict(PRESETS["g16-b4-pod16"], b4_g16)
    bow = predict(replace(PRESETS["g16-b4-pod16"], chip="bow"), b4_g16)
    assert 1.2 < bow.images_per_s / mk2.images_per_s < 1.4  # "+40 % performance"


def test_prediction_is_within_the_stated_factor_of_graphcores_result(b4_g16):
    for name, hours in PUBLISHED_HOURS_TO_TRAIN.items():
        predicted = predict(PRESETS[name], b4_g16).time_to_train_s() / 3600
        assert 1 / PUBLISHED_FACTOR < hours / predicted < PUBLISHED_FACTOR, (name, hours, predicted)


def test_training_log_line_shows_cpu_and_pod_throughput(b4_g16):
    from ipu.cost import format_throughput

    p = predict(PRESETS["g16-b4-pod64"], b4_g16)
    line = format_throughput(12.5, p)
    assert line.startswith("throughput: 12.5 images/s emulated on CPU; predicted ")
    assert f"{p.images_per_s:,.0f} images/s on POD64 (64 x Mk2 GC200)" in line
