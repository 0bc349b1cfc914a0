import logging
from dataclasses import replace

import pytest

from ipu.cost import host_io
from ipu.cost.layers import layer_cost
from ipu.cost.prediction import BREAKDOWN, device_context, predict
from ipu.plan import PRESETS, PUBLISHED_HOURS_TO_TRAIN
from tests.ipu.oracles import PUBLISHED_FACTOR
from tests.ipu.toy_profiles import toy_layer


def test_a_layer_without_geometry_runs_at_the_matrix_units_peak():
    ctx = device_context(PRESETS["g16-b4-pod16"])
    c = layer_cost(toy_layer("c", "b", flops=10**9, saved=0), ctx)
    assert c.fwd.matrix == pytest.approx(1e9 / (2 * 64 * 1440))  # 16 conv units x 4 half MACs, 1440 tiles
    assert c.bwd.matrix == pytest.approx(2 * c.fwd.matrix)
    assert c.fwd.sync == 90 and c.fwd.compute_sets == 1


def test_step_time_is_the_sum_of_the_breakdown(b4_g16):
    p = predict(PRESETS["g16-b4-pod64"], b4_g16)
    assert tuple(p.breakdown) == BREAKDOWN
    assert all(v >= 0 for v in p.breakdown.values())
    assert p.images_per_s == pytest.approx(6144 / p.step_time_s)
    assert p.time_to_train_s(10) == pytest.approx(10 * 1_281_167 / p.images_per_s)
    assert p.io_overlapped and p.breakdown["host_io"] == 0.0 < p.host_io_total_s


def test_breakdown_is_the_busiest_stage_times_the_micro_batches(b4_g16):
    plan = PRESETS["g16-b4-pod64"]
    p = predict(plan, b4_g16)
    worst = max(p.stages, key=lambda s: sum(s.seconds().values()))
    per_mb = worst.per_micro_batch
    clock = plan.pod.chip.clock_hz
    assert p.breakdown["matrix"] == pytest.approx(plan.gradient_accumulation * per_mb.matrix / clock)
    assert p.breakdown["sync"] == pytest.approx(plan.gradient_accumulation * per_mb.compute_sets * 90 / clock)
    assert p.breakdown["weight_update"] == pytest.approx(max(s.optimizer_s for s in p.stages))
    assert p.breakdown["host_call"] == pytest.approx(50e-6 / plan.device_iterations)


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
    assert floats.host_copy_s == pytest.approx(4 * uint8.host_copy_s)
    # no IO tiles: the copy into the tiles adds to the step; the NIC time (shorter than the step) does not
    assert not uint8.io_overlapped and uint8.host_io_total_s < uint8.step_time_s
    assert uint8.breakdown["host_io"] == pytest.approx(uint8.host_copy_s)


def test_host_nics_bound_the_step_rather_than_add_to_it(toy_profile):
    # a tiny model on one host's NIC: the NIC time exceeds the device time, and the step is that NIC time
    plan = replace(PRESETS["resnet50-pod16"], recompute_until="")
    p = predict(plan, toy_profile)
    device = p.step_time_s - p.breakdown["host_io"]
    assert p.host_io_total_s > device + p.host_copy_s
    assert p.step_time_s == pytest.approx(p.host_io_total_s)  # max(device + copy, NIC), not their sum


def test_exposed_host_io_is_a_max_not_a_sum():
    assert host_io.exposed_s(10.0, nic=4.0, copy=1.0, overlapped=False) == 1.0  # the copy only
    assert host_io.exposed_s(10.0, nic=15.0, copy=1.0, overlapped=False) == 5.0  # the NIC bound: 15 - 10
    assert host_io.exposed_s(10.0, nic=4.0, copy=1.0, overlapped=True) == 0.0
    assert host_io.exposed_s(10.0, nic=12.0, copy=11.0, overlapped=True) == 2.0


def test_io_tiles_only_overlap_with_grouped_schedule(b4_g16, caplog):
    plan = replace(PRESETS["g16-b4-pod16"], schedule="interleaved")
    with caplog.at_level(logging.WARNING, logger="ipu.io_tiles"):
        from ipu.memory import fit
        fit(plan, b4_g16)
    assert "will not overlap host IO" in caplog.text
    p = predict(plan, b4_g16)
    assert not p.io_overlapped and p.breakdown["host_io"] == pytest.approx(p.host_copy_s)  # added, not hidden
    grouped = predict(PRESETS["g16-b4-pod16"], b4_g16)
    assert grouped.io_overlapped and grouped.breakdown["host_io"] == 0.0


def test_all_reduce_is_a_ring_over_ipu_links(toy_profile):
    plan = replace(PRESETS["g16-b4-pod16"], pipeline_splits=("block2a",), precision="16.32")
    p = predict(plan, toy_profile)
    ring_bw = 320e9 / 10 * 2 * 0.85  # 2 links (assumed) at poplibs_test Util.cpp's linkEfficiency
    stage_bytes = (4 + 5) * 4  # stage 1 params (block2a + head) in float32 accumulators
    step = 2 * 15e-9 * (1 + 8 // 4) + 190 / 1.33e9  # global sync over 8 IPUs, one compute set
    expected = 2 * 7 / 8 * stage_bytes / ring_bw + 2 * 7 * step
    assert p.breakdown["all_reduce"] == pytest.approx(expected)
    single = predict(replace(plan, replicas=1, system="POD4"), toy_profile)
    assert single.breakdown["all_reduce"] == 0.0


def test_all_reduce_crosses_gw_links_between_pod64s(b4_g16):
    pod64 = predict(PRESETS["g16-b4-pod64"], b4_g16).breakdown["all_reduce"]
    pod128 = predict(PRESETS["g16-b4-pod128"], b4_g16).breakdown["all_reduce"]
    assert pod128 > pod64


def test_bow_is_faster_than_mk2_by_at_most_its_clock(b4_g16):
    for name in ("g16-b4-pod16", "g16-b4-pod256"):
        mk2 = predict(PRESETS[name], b4_g16)
        bow = predict(replace(PRESETS[name], chip="bow"), b4_g16)
        assert 1.2 < bow.images_per_s / mk2.images_per_s <= 1.85 / 1.33 + 1e-9  # same cycles, faster clock


def test_prediction_is_within_the_stated_factor_of_graphcores_result(b4_g16):
    for name, hours in PUBLISHED_HOURS_TO_TRAIN.items():
        predicted = predict(PRESETS[name], b4_g16).time_to_train_s() / 3600
        assert 1 / PUBLISHED_FACTOR < hours / predicted < PUBLISHED_FACTOR, (name, hours, predicted)
