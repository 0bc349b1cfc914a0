"""The memory and cost models on the numerics engine's own EfficientNet profiles."""

from dataclasses import replace

import pytest

import models
from ipu.cost.prediction import predict
from ipu.memory import IpuOutOfMemoryError, check_fit
from ipu.pipeline.split import block_order
from ipu.plan import PRESETS, PUBLISHED_HOURS_TO_TRAIN, load_profile
from tests.ipu.oracles import PUBLISHED_FACTOR


@pytest.fixture(scope="module")
def g16():
    return load_profile(PRESETS["g16-b4-pod256"])


def test_profile_blocks_match_the_model(g16):
    model = models.build_model("efficientnet-b4-gn", 1000, group_size=16, expand_ratio=4)
    assert block_order(g16) == model.blocks()
    assert "block4a" in model.blocks()


def test_g16_recipe_fits_and_fails_without_recomputation(g16):
    assert check_fit(PRESETS["g16-b4-pod256"], g16).fits
    with pytest.raises(IpuOutOfMemoryError, match="Out of memory on tile"):
        check_fit(replace(PRESETS["g16-b4-pod256"], recompute=False), g16)


def test_g1_baseline_fits():
    plan = PRESETS["g1-b4-4ipu"]
    assert check_fit(plan, load_profile(plan)).fits


def test_prediction_within_the_stated_factor(g16):
    hours = predict(PRESETS["g16-b4-pod256"], g16).time_to_train_s() / 3600
    published = PUBLISHED_HOURS_TO_TRAIN["g16-b4-pod256"]
    assert 1 / PUBLISHED_FACTOR < published / hours < PUBLISHED_FACTOR
