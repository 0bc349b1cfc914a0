"""validate --sensitivity: each constant scaled one at a time, the structure of its output."""

import json

import pytest

from ipu.cost import sensitivity as S
from ipu.cost import updates


def test_whole_numbers_stay_whole_and_positive():
    assert S.scaled(2, 0.5) == 1 and S.scaled(2, 1.5) == 3 and S.scaled(1, 0.5) == 1
    assert S.scaled(0.7, 1.5) == pytest.approx(1.05)


def test_a_constant_is_scaled_inside_the_block_only():
    host_call = S.Assumption("ipu.cost.updates", "HOST_CALL_S", "host call")
    before = updates.HOST_CALL_S
    with S.scaled_constant(host_call, 1.5):
        assert updates.HOST_CALL_S == pytest.approx(1.5 * before)
    assert updates.HOST_CALL_S == before


def test_each_assumption_moves_each_preset_by_what_it_adds():
    host_call = S.Assumption("ipu.cost.updates", "HOST_CALL_S", "host call")
    (row,) = S.sensitivity(["resnet50-pod16"], assumptions=[host_call])
    assert (row.preset, row.chip, row.assumption) == ("resnet50-pod16", "mk2", host_call)
    per_update = updates.HOST_CALL_S / 133  # the recipe's device iterations
    assert row.scaled_s[0] - row.base_s == pytest.approx(-0.5 * per_update)
    assert row.scaled_s[1] - row.base_s == pytest.approx(0.5 * per_update)
    assert row.changes[0] == pytest.approx(-0.5 * per_update / row.base_s)
    table = S.format_sensitivity([row]).splitlines()
    assert table[0] == "| constant | value | `resnet50-pod16` |" and len(table) == 3
    assert table[2].startswith("| `HOST_CALL_S`: host call | 5e-05 | -0.0 / +0.0 |")


def test_every_assumption_names_a_number_of_the_model():
    for a in S.ASSUMPTIONS:
        assert isinstance(a.value, (int, float)) and a.value > 0, a


def test_validate_sensitivity_prints_json(monkeypatch, capsys):
    from launch.predict.cli import main

    monkeypatch.setattr(S, "ASSUMPTIONS", (S.Assumption("ipu.cost.host_io", "HOST_LINK_EFFICIENCY", "host link"),))
    assert main(["validate", "--sensitivity", "--preset", "resnet50-pod16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 1 and doc["factors"] == [0.5, 1.5]
    (row,) = doc["sensitivity"]
    assert (row["constant"], row["preset"], row["value"]) == ("HOST_LINK_EFFICIENCY", "resnet50-pod16", 0.7)
    low, high = row["changes"]
    assert low > 0 > high  # a slower host link copies longer: the copy into the tiles adds to the step


def test_validate_refuses_a_preset_without_sensitivity(capsys):
    from launch.predict.cli import main

    assert main(["validate", "--preset", "resnet50-pod16"]) == 2
    assert "--preset goes with --sensitivity" in capsys.readouterr().err
