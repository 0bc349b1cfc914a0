"""validate --sensitivity: each assumption varied one at a time, the structure of its output."""

import json
from dataclasses import replace

import pytest

from ipu.cost import sensitivity as S
from ipu.cost.assumptions import DEFAULT, NAMES
from ipu.cost.collectives import outer_ring_bytes_per_s
from ipu.specs import MK2_GC200


def test_whole_numbers_stay_whole_and_positive():
    assert S.scaled(2, 0.5) == 1 and S.scaled(2, 1.5) == 3 and S.scaled(1, 0.5) == 1
    assert S.scaled(0.7, 1.5) == pytest.approx(1.05)


def test_a_number_is_scaled_and_a_choice_takes_the_others():
    assert [(label, a.sync_cycles) for label, a in S.variants("sync_cycles", DEFAULT, MK2_GC200)] == [
        ("x0.5", 45), ("x1.5", 135)]
    assert [(label, a.tiles_per_exchange_bus) for label, a in S.variants("tiles_per_exchange_bus", DEFAULT,
                                                                         MK2_GC200)] == [("x0.5", 1), ("x2", 4)]
    assert [(label, a.outer_ring_statistic) for label, a in S.variants("outer_ring_statistic", DEFAULT,
                                                                       MK2_GC200)] == [("median", "median"),
                                                                                       ("minimum", "minimum")]
    (_, low), _ = S.variants("outer_ring_bytes_per_s", DEFAULT, MK2_GC200)
    assert low.outer_ring_bytes_per_s == 0.5 * outer_ring_bytes_per_s(DEFAULT)  # scaled from the calibration
    assert S.value_of("host_link_bytes_per_s", DEFAULT, MK2_GC200) == 64e9  # the chip's own
    assert S.value_of("host_link_bytes_per_s", replace(DEFAULT, host_link_bytes_per_s=1e9), MK2_GC200) == 1e9


def test_each_assumption_moves_each_preset_by_what_it_adds():
    (row,) = S.sensitivity(["resnet50-pod16"], names=["host_call_s"])
    assert (row.preset, row.chip, row.name, row.value, row.variants) == ("resnet50-pod16", "mk2", "host_call_s", 50e-6,
                                                                         ("x0.5", "x1.5"))
    per_update = 50e-6 / 133  # the recipe's device iterations
    assert row.scaled_s[0] - row.base_s == pytest.approx(-0.5 * per_update)
    assert row.scaled_s[1] - row.base_s == pytest.approx(0.5 * per_update)
    assert row.changes[0] == pytest.approx(-0.5 * per_update / row.base_s)
    table = S.format_sensitivity([row]).splitlines()
    assert table[0] == "| assumption | value | `resnet50-pod16` |" and len(table) == 3
    assert table[2].startswith("| `host_call_s`: host round trip per device-iteration call (s) | 5e-05 | -0.0 / +0.0 |")


def test_a_categorical_assumption_names_its_alternatives():
    (row,) = S.sensitivity(["resnet50-mlperf-pod256"], names=["outer_ring_statistic"])
    assert row.value == "lower_quartile" and row.variants == ("median", "minimum")
    median, minimum = row.changes
    assert median > 0 > minimum  # a longer POD256 - POD128 difference: a slower calibrated ring
    (line,) = S.format_sensitivity([row]).splitlines()[2:]
    assert "| lower_quartile (median / minimum) |" in line


def test_every_assumption_is_varied():
    for name in NAMES:
        assert len(S.variants(name, DEFAULT, MK2_GC200)) >= 2, name


def test_validate_sensitivity_prints_json(monkeypatch, capsys):
    from launch.predict.cli import main

    monkeypatch.setattr(S, "NAMES", ("host_link_efficiency",))
    assert main(["validate", "--sensitivity", "--preset", "resnet50-pod16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 1 and doc["factors"] == [0.5, 1.5]
    (row,) = doc["sensitivity"]
    assert (row["assumption"], row["preset"], row["value"]) == ("host_link_efficiency", "resnet50-pod16", 0.7)
    assert row["variants"] == ["x0.5", "x1.5"]
    low, high = row["changes"]
    assert low > 0 > high  # a slower host link copies longer: the copy into the tiles adds to the step


def test_validate_refuses_a_preset_without_sensitivity(capsys):
    from launch.predict.cli import main

    assert main(["validate", "--preset", "resnet50-pod16"]) == 2
    assert "--preset goes with --sensitivity" in capsys.readouterr().err
