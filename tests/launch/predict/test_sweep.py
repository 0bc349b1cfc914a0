"""launch.predict.sweep: option values, combinations, the batch split and each combination's plan (exact values)."""

import pytest

from ipu.plan import PRESETS
from launch.predict.sweep import (OPTION_BY_FIELD, UsageError, batch_split, combinations, describe_choice, is_sweep,
                          parse_grid, parse_values, plan_for, replicas_for)

G16 = PRESETS["g16-b4-pod16"]  # 8 replicas x 2 IPUs, micro-batch 3, GA 256: 6144


def test_values_parse_in_order_without_repeats():
    assert parse_values(OPTION_BY_FIELD["micro_batch"], "2, 3,4,3") == (2, 3, 4)
    assert parse_values(OPTION_BY_FIELD["system"], "pod16,POD64") == ("POD16", "POD64")
    assert parse_values(OPTION_BY_FIELD["recompute"], "on,false") == (True, False)
    assert parse_values(OPTION_BY_FIELD["available_memory_proportion"], "0.4") == (0.4,)
    assert parse_values(OPTION_BY_FIELD["num_io_tiles"], "0,32") == (0, 32)


@pytest.mark.parametrize("field, text, words", [
    ("micro_batch", "two", "--micro-batch 'two' is not a whole number"),
    ("micro_batch", "0", "--micro-batch 0 must be at least 1"),
    ("micro_batch", "2,,3", "--micro-batch '2,,3' has an empty item"),
    ("ipus_per_replica", "3", "--ipus-per-replica 3 is not a power of two"),
    ("system", "POD32", "--system 'POD32' is not one of POD4, POD16, POD64, POD128, POD256"),
    ("precision", "16.8", "--precision '16.8' is not one of"),
    ("available_memory_proportion", "1.5", "--available-memory-proportion 1.5 must be in (0, 1]"),
    ("recompute", "maybe", "--recompute 'maybe' is not true or false"),
])
def test_bad_values_name_the_flag(field, text, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_values(OPTION_BY_FIELD[field], text)


def test_combinations_are_the_product_first_option_slowest():
    grid = parse_grid({"system": "POD16,POD64", "micro_batch": "2,3", "ipus_per_replica": None})
    assert grid == {"system": ("POD16", "POD64"), "micro_batch": (2, 3)}
    assert combinations(grid) == [{"system": "POD16", "micro_batch": 2}, {"system": "POD16", "micro_batch": 3},
                                  {"system": "POD64", "micro_batch": 2}, {"system": "POD64", "micro_batch": 3}]
    assert combinations({}) == [{}]
    assert is_sweep(grid) and not is_sweep({"system": ("POD16",)})
    assert describe_choice({"system": "POD16", "recompute": False}) == "--system POD16 --recompute false"


def test_batch_split_global_batch_is_micro_batch_x_replicas_x_accumulation():
    assert replicas_for("POD64", 4) == 16
    assert replicas_for("POD256", 2) == 128
    assert batch_split(6144, 3, 128) == 16
    assert batch_split(6144, 4, 64) == 24
    with pytest.raises(ValueError, match=r"--global-batch 6144 is not a multiple of --micro-batch 5 x 16 replicas "
                                         r"= 80: use --global-batch 6160 or another micro-batch"):
        batch_split(6144, 5, 16)
    with pytest.raises(ValueError, match="--ipus-per-replica 8 is more than POD4's 4 IPUs"):
        replicas_for("POD4", 8)


def test_plan_for_fills_the_system_and_keeps_the_global_batch():
    plan = plan_for(G16, {"system": "POD64", "micro_batch": 4, "ipus_per_replica": 4})
    assert (plan.replicas, plan.ipus_per_replica, plan.micro_batch, plan.gradient_accumulation) == (16, 4, 4, 96)
    assert plan.global_batch == 6144 and plan.pipeline_splits == () and plan.num_hosts == 4  # POD64's most hosts
    same = plan_for(G16, {"micro_batch": 2})  # the configuration's replicas, IPUs and splits
    assert (same.replicas, same.gradient_accumulation, same.pipeline_splits, same.num_hosts) == (8, 384, ("block4a",), 1)
    assert plan_for(G16, {"global_batch": 3072}).gradient_accumulation == 128
    assert plan_for(G16, {"optimizer": "adamw"}).optimizer == "adam"
    assert plan_for(G16, {"optimizer": "sgd"}, momentum=0.9).optimizer == "momentum"
    assert plan_for(G16, {}) == G16


def test_plan_for_names_the_flags_when_a_combination_cannot_run():
    with pytest.raises(ValueError, match=r"--global-batch 96 gives gradient accumulation 1 with --micro-batch 3 x 32 "
                                         r"replicas, too few for a 2-stage pipeline .* use --global-batch 384 or more"):
        plan_for(G16, {"system": "POD64", "global_batch": 96})


def test_a_micro_batch_sweep_may_hold_the_accumulation_and_let_the_global_batch_follow():
    from launch.predict.sweep import batch_rule

    plans = [plan_for(G16, {"micro_batch": m, "gradient_accumulation": 64}) for m in (1, 2, 5)]
    assert [(p.micro_batch, p.gradient_accumulation, p.global_batch) for p in plans] == [
        (1, 64, 512), (2, 64, 1024), (5, 64, 2560)]  # 5 runs: no global batch to divide
    with pytest.raises(UsageError, match="--global-batch and --gradient-accumulation both fix the batch: give one"):
        plan_for(G16, {"global_batch": 6144, "gradient_accumulation": 64})
    held = batch_rule(parse_grid({"micro_batch": "1,2,5", "gradient_accumulation": "64"}), G16)
    assert held == ("gradient accumulation held at 64 (--gradient-accumulation): the global batch follows, "
                    "micro-batch x replicas x accumulation")
    assert batch_rule(parse_grid({"micro_batch": "1,2"}), G16).startswith(
        "global batch held at 6144 (the configuration's): the gradient accumulation follows")
