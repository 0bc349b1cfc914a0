"""Collectives, host IO, the MLPerf-log calibration and recomputation checkpoints: exact values."""

from dataclasses import replace

import pytest

from ipu.cost import collectives
from ipu.cost.assumptions import DEFAULT
from ipu.cost.evidence import mlperf_v11
from ipu.cost.prediction import predict, stage_costs
from ipu.pipeline.split import split_stages
from ipu.plan import PRESETS, IpuPlan
from ipu.specs import MK2_GC200


def test_global_sync_is_15_ns_per_hop_there_and_back():
    assert collectives.global_sync_s(1, DEFAULT) == 0.0
    assert collectives.global_sync_s(2, DEFAULT) == pytest.approx(2 * 15e-9 * 1)  # one hop within a card
    assert collectives.global_sync_s(16, DEFAULT) == pytest.approx(2 * 15e-9 * 5)  # + one per pair of cards
    assert collectives.global_sync_s(16, replace(DEFAULT, global_sync_s_per_hop=1e-6)) == pytest.approx(2 * 1e-6 * 5)


def test_ring_all_reduce_moves_twice_the_data_less_one_share():
    assert collectives.ring_all_reduce_s(800.0, 4, 100.0, 0.5) == pytest.approx(2 * 3 / 4 * 8 + 6 * 0.5)
    assert collectives.ring_all_reduce_s(800.0, 1, 100.0, 0.5) == 0.0


def test_the_outer_ring_is_calibrated_on_the_pod128_to_pod256_difference():
    # 4 domains move 2*3/4 of the gradient, 2 domains 2*1/2: half a gradient more, plus 4 more ring steps
    assert collectives.calibrate_outer_ring(100.0, 2.0, 2, 4, 0.0, 0.0) == pytest.approx(50.0 / 2.0)
    assert collectives.calibrate_outer_ring(100.0, 2.0, 2, 4, 0.1, 0.25) == pytest.approx(50.0 / (2.0 - 6 * 0.25 + 2 * 0.1))
    with pytest.raises(ValueError, match="cannot calibrate"):
        collectives.calibrate_outer_ring(100.0, 1.0, 2, 4, 0.0, 0.25)

    def rate(pod256_epoch_s, pod128_epoch_s, fixed_cycles=90 + 100):
        def step(ipus):
            return 2 * 15e-9 * (1 + ipus // 4) + fixed_cycles / 1.33e9
        delta = pod256_epoch_s / (1_281_167 / 10240) - pod128_epoch_s / (1_281_167 / 5120)
        return 25_557_032 * 2 * 0.5 / (delta - 6 * step(256) + 2 * step(128))

    assert collectives.outer_ring_bytes_per_s(DEFAULT) == pytest.approx(rate(3.678, 6.907))  # lower quartiles
    assert 13e9 < collectives.outer_ring_bytes_per_s(DEFAULT) < 16e9  # "about 15 GB/s"
    median = replace(DEFAULT, outer_ring_statistic="median")
    assert collectives.outer_ring_bytes_per_s(median) == pytest.approx(rate(3.930, 7.189))
    minimum = replace(DEFAULT, outer_ring_statistic="minimum")
    assert collectives.outer_ring_bytes_per_s(minimum) == pytest.approx(rate(3.642, 6.884))
    slower_sync = replace(DEFAULT, sync_cycles=180)  # calibrated again under the assumptions it is given
    assert collectives.outer_ring_bytes_per_s(slower_sync) == pytest.approx(rate(3.678, 6.907, 180 + 100))
    assert collectives.outer_ring_bytes_per_s(replace(DEFAULT, outer_ring_bytes_per_s=1e9)) == 1e9


def test_the_calibration_holds_in_the_model(resnet50_profile):
    runs = {n: predict(PRESETS[f"resnet50-mlperf-pod{n}"], resnet50_profile) for n in (128, 256)}
    difference = runs[256].breakdown["all_reduce"] - runs[128].breakdown["all_reduce"]
    assert difference == pytest.approx(mlperf_v11.outer_ring_delta_s(), rel=1e-9)
    assert sum(layer.params for layer in resnet50_profile) == collectives.RESNET50_PARAMS


def test_mlperf_log_epochs_and_their_lower_quartile():
    def line(key, ms, epoch):
        return (f':::MLLOG {{"namespace": "resnet", "time_ms": {ms}, "event_type": "INTERVAL_START", "key": "{key}", '
                f'"value": null, "metadata": {{"epoch_num": {epoch}}}}}')
    log = [line("epoch_start", 0, 1), line("epoch_stop", 5000, 1), "noise", line("epoch_start", 5001, 2),
           line("epoch_stop", 8001, 2), line("epoch_start", 8002, 3), line("epoch_stop", 11102, 3),
           line("epoch_start", 11103, 4), line("epoch_stop", 14103, 4)]
    assert mlperf_v11.epoch_seconds(log) == [5.0, 3.0, 3.1, 3.0]
    assert mlperf_v11.training_epoch_s([5.0, 3.0, 3.1, 3.0]) == 3.0
    assert mlperf_v11.training_epoch_s([5.0, 3.0, 3.2, 3.0], "median") == pytest.approx(3.1)
    assert mlperf_v11.training_epoch_s([5.0, 3.0, 3.1, 2.9], "minimum") == 2.9
    with pytest.raises(ValueError, match="no epochs"):
        mlperf_v11.training_epoch_s([])
    with pytest.raises(ValueError, match="unknown statistic 'mean': choose one of lower_quartile, median, minimum"):
        mlperf_v11.training_epoch_s([3.0], "mean")
    assert mlperf_v11.outer_ring_delta_s("minimum") == pytest.approx(3.642 * 10240 / 1_281_167
                                                                       - 6.884 * 5120 / 1_281_167)
    run = mlperf_v11.RUNS["POD16"]
    assert run.micro_batch == 20 and run.step_s == pytest.approx(43.216 * 3200 / 1_281_167)


def test_cross_replica_norm_statistics_are_a_ring_of_span_ipus():
    assert collectives.norm_statistics(64, 1, MK2_GC200, DEFAULT).compute_sets == 0
    c = collectives.norm_statistics(64, 2, MK2_GC200, DEFAULT)
    link = 320e9 / 10 * 2 * 0.85
    transfer = collectives.ring_all_reduce_s(2 * 64 * 4, 2, link, 2 * 15e-9)
    assert c.compute_sets == 2 and c.sync == 2 * 90
    assert c.exchange == pytest.approx(transfer * 1.33e9 + 2 * 100)


def test_bn_span_adds_the_collectives_to_every_batch_norm(resnet50_profile):
    plan = PRESETS["resnet50-pod16"]
    split = split_stages(resnet50_profile, 1, ())
    shared, alone = (stage_costs(p, resnet50_profile, split)[0] for p in (plan, replace(plan, norm_span=1)))
    norms = [i for i, layer in enumerate(resnet50_profile) if layer.kind == "norm"]
    for i in norms:
        layer = resnet50_profile[i]
        extra = collectives.norm_statistics(layer.in_shape[-1], 2, MK2_GC200, DEFAULT)
        assert shared.layers[i].fwd.compute_sets == alone.layers[i].fwd.compute_sets + extra.compute_sets
        assert shared.layers[i].bwd.exchange == pytest.approx(alone.layers[i].bwd.exchange + extra.exchange)


def test_recomputation_stops_at_the_named_block(resnet50_profile):
    plan = PRESETS["resnet50-pod16"]
    (stage,) = stage_costs(plan, resnet50_profile, split_stages(resnet50_profile, 1, ()))
    first_kept = next(i for i, layer in enumerate(resnet50_profile) if layer.block == "layer3.4")
    assert stage.recomputed == first_kept
    assert stage.recomp.total == pytest.approx(sum(c.fwd.total for c in stage.layers[:first_kept]))
    (whole,) = stage_costs(replace(plan, recompute_until=""), resnet50_profile, split_stages(resnet50_profile, 1, ()))
    assert whole.recomputed == len(resnet50_profile) and whole.recomp.total > stage.recomp.total
    with pytest.raises(ValueError, match="recompute_until 'layer9' is not a block or module of resnet50: choose one of stem"):
        predict(replace(plan, recompute_until="layer9"), resnet50_profile)


@pytest.mark.parametrize("bad, message", [
    (dict(recompute=False), "needs recompute=True"),
    (dict(ipus_per_replica=2, replicas=8), "needs recompute=True and one pipeline stage"),
    (dict(norm_span=3), "norm_span 3 must be a power of two dividing the 16 replicas"),
    (dict(norm_span=0), "norm_span must be at least 1"),
])
def test_plan_refuses_checkpoints_and_spans_it_cannot_run(bad, message):
    with pytest.raises(ValueError, match=message):
        IpuPlan(**{**dict(model="resnet50", replicas=16, recompute=True, recompute_until="layer3.4"), **bad})


def test_a_single_ipu_replica_keeps_the_activations_it_does_not_recompute(toy_profile):
    from ipu.pipeline.split import replica_schedule, stashed_elems

    split = split_stages(toy_profile, 1, ())
    schedule = replica_schedule("sequential", 1, 2, recompute=True)
    (all_recomputed,) = stashed_elems(toy_profile, split, schedule, 100)
    (tail_kept,) = stashed_elems(toy_profile, split, schedule, 100, recompute_until="block2a")
    assert "activations block2a (kept)" in tail_kept and "activations head (kept)" in tail_kept
    assert tail_kept["activations block2a (kept)"] == 8 and tail_kept["activations head (kept)"] == 9
    assert "checkpoint block2a" in all_recomputed and "checkpoint block2a" not in tail_kept
