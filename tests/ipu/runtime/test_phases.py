"""Phase shares and the critical path across instances (pure arithmetic, exact values)."""

import pytest

from ipu.runtime.phases import critical_path, shares


def test_shares_split_the_update_time():
    out = shares({"model": 6.0, "all_reduce": 2.0, "optimizer": 1.0}, 10.0)
    assert out["model"] == 0.6 and out["all_reduce"] == 0.2 and out["optimizer"] == 0.1
    assert out["other"] == pytest.approx(0.1) and out["outside_model"] == pytest.approx(0.4)
    assert shares({"model": 1.0}, 0.0) == {}


def test_the_instance_that_waits_least_is_the_critical_one():
    # instance 1's model is slower: instance 0 waits 3 s for it in the all-reduce, instance 2 1 s
    out = critical_path([30.0, 33.0, 32.0], [4.0, 1.0, 2.0], [40.0, 40.0, 40.0])
    assert out["critical_instance"] == 1
    assert out["critical_outside_model_share"] == pytest.approx(1 - 33 / 40)
    assert out["instance_wait_share"] == pytest.approx([3 / 40, 0.0, 1 / 40])


def test_one_instance_waits_for_nobody():
    out = critical_path([8.0], [0.5], [10.0])
    assert out["critical_instance"] == 0 and out["instance_wait_share"] == [0.0]
    assert out["critical_outside_model_share"] == pytest.approx(0.2)


def test_critical_path_rejects_mismatched_lists():
    with pytest.raises(ValueError, match="one model, all-reduce and update time per instance"):
        critical_path([1.0, 2.0], [0.1], [3.0, 3.0])
