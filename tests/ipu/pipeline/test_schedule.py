import pytest

from ipu.pipeline.schedule import build_schedule
from tests.ipu.oracles import expected_bubble_share


def test_grouped_two_stages_four_micro_batches():
    s = build_schedule("grouped", 2, 4)
    assert s.labels() == [
        ["FWD.1", "FWD.2", "FWD.3", "FWD.4", "BWD.1", "BWD.2", "BWD.3", "BWD.4"],
        ["FWD.1", "FWD.2", "BWD.1", "FWD.3", "BWD.2", "FWD.4", "BWD.3", "BWD.4"],
    ]
    assert [op.slot for op in s.ops[0]] == [0, 1, 2, 3, 3, 4, 5, 6]
    assert s.num_slots == 4 + 2 * 2 - 1
    assert [s.max_in_flight(i) for i in range(2)] == [4, 2]  # 2 (S - s)


def test_grouped_with_recomputation_recomputes_before_backward_except_last_stage():
    s = build_schedule("grouped", 2, 4, recompute=True)
    assert s.labels()[0] == ["FWD.1", "FWD.2", "FWD.3", "FWD.4", "RECOMP.1", "BWD.1", "RECOMP.2", "BWD.2",
                             "RECOMP.3", "BWD.3", "RECOMP.4", "BWD.4"]
    assert "RECOMP.1" not in s.labels()[1]


def test_interleaved_is_one_forward_one_backward():
    s = build_schedule("interleaved", 2, 4)
    assert s.labels() == [
        ["FWD.1", "FWD.2", "BWD.1", "FWD.3", "BWD.2", "FWD.4", "BWD.3", "BWD.4"],
        ["FWD.1", "BWD.1", "FWD.2", "BWD.2", "FWD.3", "BWD.3", "FWD.4", "BWD.4"],
    ]
    assert [op.slot for op in s.ops[0]] == [0, 1, 3, 4, 5, 6, 7, 9]
    assert [op.slot for op in s.ops[1]] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert [s.max_in_flight(i) for i in range(2)] == [2, 1]  # S - s: less than grouped


def test_sequential_runs_one_micro_batch_at_a_time():
    s = build_schedule("sequential", 2, 2)
    assert s.labels() == [["FWD.1", "BWD.1", "FWD.2", "BWD.2"], ["FWD.1", "BWD.1", "FWD.2", "BWD.2"]]
    assert [op.slot for op in s.ops[0]] == [0, 3, 4, 7]
    assert [op.slot for op in s.ops[1]] == [1, 2, 5, 6]
    assert s.max_in_flight(0) == 1


@pytest.mark.parametrize("kind", ["grouped", "interleaved", "sequential"])
@pytest.mark.parametrize("stages,n", [(1, 3), (2, 4), (4, 8), (3, 7)])
def test_every_schedule_respects_data_dependencies(kind, stages, n):
    s = build_schedule(kind, stages, n, recompute=True)
    slot = {(op.kind, op.stage, op.micro_batch): op.slot for ops in s.ops for op in ops}
    for m in range(n):
        for st in range(stages):
            assert slot[("FWD", st, m)] < slot[("BWD", st, m)]
            if st:
                assert slot[("FWD", st - 1, m)] < slot[("FWD", st, m)]
                assert slot[("BWD", st, m)] < slot[("BWD", st - 1, m)]
    assert all(len(ops) == 2 * n + (n if st < stages - 1 or stages == 1 else 0) for st, ops in enumerate(s.ops))


def test_bad_schedule_names_the_choices():
    with pytest.raises(ValueError, match="grouped, interleaved, sequential"):
        build_schedule("1f1b", 2, 4)


def test_device_mapping_puts_stages_on_ipus():
    s = build_schedule("grouped", 4, 8, device_mapping=[0, 1, 1, 0])
    assert s.num_ipus == 2 and [s.ipu_of(k) for k in range(4)] == [0, 1, 1, 0]
    assert build_schedule("grouped", 3, 6).num_ipus == 3  # default: stage s on IPU s
    with pytest.raises(ValueError, match="interleaved schedule does not support"):
        build_schedule("interleaved", 2, 4, device_mapping=[0, 0])
    with pytest.raises(ValueError, match="3 entries for 2 stages"):
        build_schedule("grouped", 2, 4, device_mapping=[0, 1, 2])


def test_expected_bubble_share_is_exact():
    assert str(expected_bubble_share("grouped", 2, 4)) == "1/5"  # (S-1)/(N+S-1)
    assert str(expected_bubble_share("sequential", 4, 8, 1, 2)) == "3/4"  # (S-1)/S
    assert str(expected_bubble_share("interleaved", 3, 6, 1, 2)) == "11/29"  # 1 - 18/(3 + 8 + 9*2)
    assert expected_bubble_share("grouped", 1, 5) == 0
