"""Whole-prediction monotonicity: micro-batch, chip, tiles."""

from dataclasses import replace


from ipu.cost.prediction import predict
from ipu.memory import fit
from ipu.plan import PRESETS
from tests.ipu.effnet_profile import efficientnet_profile

B0_PLAN = replace(PRESETS["g16-b4-pod16"], image_size=224, pipeline_splits=("block4a",), gradient_accumulation=16,
                  replicas=8)


def test_larger_micro_batches_never_lower_throughput_while_they_fit():
    rates = []
    for micro_batch in (1, 2, 4, 8):
        plan = replace(B0_PLAN, micro_batch=micro_batch)
        profile = efficientnet_profile(0, micro_batch, 16, 4, 224)
        if not fit(plan, profile).fits:
            break
        rates.append(predict(plan, profile).images_per_s)
    assert len(rates) >= 3
    assert rates == sorted(rates), rates


def test_bow_is_never_slower_than_mk2(b4_g16, b4_g1):
    for name, plan in PRESETS.items():
        if not name.startswith(("g16", "g1-")):
            continue
        profile = b4_g16 if name.startswith("g16") else b4_g1
        mk2 = predict(replace(plan, chip="mk2"), profile)
        bow = predict(replace(plan, chip="bow"), profile)
        assert bow.step_time_s <= mk2.step_time_s, name


def test_io_tiles_taken_from_compute_never_speed_compute_up(b4_g16):
    plan = PRESETS["g16-b4-pod256"]
    fewer = predict(replace(plan, num_io_tiles=128), b4_g16)
    more = predict(replace(plan, num_io_tiles=0), b4_g16)
    assert more.stage_seconds[1] <= fewer.stage_seconds[1]
