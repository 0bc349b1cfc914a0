"""The cost model's assumptions: one frozen object, its default the model as it is, a what-if a replace."""

import importlib
import pkgutil
from dataclasses import replace

import pytest

import ipu.cost
from ipu.cost.assumptions import CHIP_FIELDS, DEFAULT, NAMES, Assumptions, choices, describe
from ipu.cost.prediction import predict
from ipu.plan import PRESETS
from ipu.specs import MK2_GC200


def test_the_default_is_the_prediction_without_assumptions(resnet50_profile):
    plan = PRESETS["resnet50-mlperf-pod256"]  # BN span, both all-reduce rings, the host copy
    assert predict(plan, resnet50_profile, DEFAULT).breakdown == predict(plan, resnet50_profile).breakdown


def test_a_replaced_assumption_moves_only_what_it_feeds(resnet50_profile):
    plan = PRESETS["resnet50-pod16"]
    base = predict(plan, resnet50_profile)
    slower = predict(plan, resnet50_profile, replace(DEFAULT, sync_cycles=2 * DEFAULT.sync_cycles))
    assert slower.step_time_s > base.step_time_s and slower.breakdown["sync"] > base.breakdown["sync"]
    call = predict(plan, resnet50_profile, replace(DEFAULT, host_call_s=1e-3))
    assert call.breakdown["host_call"] == pytest.approx(1e-3 / 133)  # the recipe's device iterations
    assert {k: v for k, v in call.breakdown.items() if k != "host_call"} == \
        {k: v for k, v in base.breakdown.items() if k != "host_call"}


def test_a_chip_field_overrides_the_chips_own(resnet50_profile):
    plan = PRESETS["resnet50-pod16"]
    base = predict(plan, resnet50_profile)
    half_link = predict(plan, resnet50_profile, replace(DEFAULT, host_link_bytes_per_s=32e9))  # Mk2: 64 GB/s
    assert half_link.host_copy_s == pytest.approx(2 * base.host_copy_s)
    wider = predict(plan, resnet50_profile, replace(DEFAULT, coeff_load_bytes_per_cycle=32))
    assert wider.breakdown["matrix"] < base.breakdown["matrix"]
    assert DEFAULT.chip_spec(MK2_GC200) is MK2_GC200
    assert replace(DEFAULT, tiles_per_exchange_bus=1).chip_spec(MK2_GC200) == replace(MK2_GC200,
                                                                                       tiles_per_exchange_bus=1)


def test_the_outer_ring_statistic_moves_the_calibrated_pods_only(resnet50_profile):
    median = replace(DEFAULT, outer_ring_statistic="median")
    pod256, pod16 = PRESETS["resnet50-mlperf-pod256"], PRESETS["resnet50-mlperf-pod16"]
    assert predict(pod256, resnet50_profile, median).step_time_s != predict(pod256, resnet50_profile).step_time_s
    assert predict(pod16, resnet50_profile, median).breakdown == predict(pod16, resnet50_profile).breakdown


@pytest.mark.parametrize("bad, message", [
    (dict(sync_cycles=0), "sync_cycles = 0: sync per compute set must be positive"),
    (dict(tiles_per_exchange_bus=-1), "tiles_per_exchange_bus = -1: tiles sharing an exchange bus must be positive"),
    (dict(outer_ring_statistic="mean"), "outer_ring_statistic 'mean' is not one of lower_quartile, median, minimum"),
])
def test_bad_assumptions_are_refused_with_the_value(bad, message):
    with pytest.raises(ValueError, match=message):
        Assumptions(**bad)


def test_every_field_says_what_it_is_and_where_it_comes_from():
    for name in NAMES:
        what, source = describe(name)
        assert what and source, name
    assert choices("outer_ring_statistic") == ("lower_quartile", "median", "minimum") and choices("sync_cycles") == ()
    assert set(CHIP_FIELDS) <= set(NAMES)
    with pytest.raises(ValueError, match="Assumptions has no field 'sync': choose one of sync_cycles"):
        describe("sync")


def test_no_module_of_the_cost_model_keeps_an_assumption_as_a_constant():
    modules = [importlib.import_module(f"ipu.cost.{m.name}") for m in pkgutil.iter_modules(ipu.cost.__path__)
               if not m.ispkg]
    for module in modules:
        for name in NAMES:
            assert not hasattr(module, name.upper()), f"{module.__name__}.{name.upper()}: read it from Assumptions"
