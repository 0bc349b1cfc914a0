import pytest

from ipu.pipeline.schedule import build_schedule
from ipu.pipeline.timeline import bubble_share, format_sequence, format_timeline, place, plot_timeline, slot_durations

COSTS = [{"FWD": 1.0, "RECOMP": 0.5, "BWD": 2.0}, {"FWD": 3.0, "BWD": 4.0}]


def test_slots_last_as_long_as_the_busiest_ipu():
    s = build_schedule("grouped", 2, 4, recompute=True)
    # slot 0: IPU0 FWD (1); 1: IPU1 FWD (3); 2..4: IPU1 FWD+BWD (7) vs IPU0 <= 1+0.5+2;
    # 5: IPU1 BWD (4) vs IPU0 RECOMP+BWD (2.5); 6: IPU0 RECOMP+BWD (2.5)
    assert slot_durations(s, COSTS) == [1.0, 3.0, 7.0, 7.0, 7.0, 4.0, 2.5]
    assert slot_durations(s, COSTS, sync_s=0.5)[0] == 1.5


def test_bars_run_back_to_back_within_a_slot():
    s = build_schedule("grouped", 2, 4, recompute=True)
    bars = [b for b in place(s, COSTS) if b.ipu == 0 and b.start_s >= 11.0 and b.start_s < 18.0]
    assert [(b.label, b.start_s, b.end_s) for b in bars] == [
        ("FWD.4", 11.0, 12.0), ("RECOMP.1", 12.0, 12.5), ("BWD.1", 12.5, 14.5)]


def test_cost_count_must_match_stages():
    with pytest.raises(ValueError, match="costs for 1 stages but the schedule has 2"):
        slot_durations(build_schedule("grouped", 2, 4), COSTS[:1])


def test_text_timeline():
    text = format_timeline(build_schedule("grouped", 2, 4))
    lines = text.splitlines()
    assert lines[0] == "grouped schedule, 2 stages, 4 micro-batches"
    assert lines[2].split("|")[1:5] == [" FWD.1       ", " FWD.2       ", " FWD.3       ", " FWD.4 BWD.1 "]
    assert lines[3].split("|")[2].strip() == "FWD.1"


def test_png_timeline(tmp_path):
    path = plot_timeline(build_schedule("interleaved", 2, 4), COSTS, tmp_path / "t.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sequence_notation_one_line_per_ipu():
    assert format_sequence(build_schedule("grouped", 2, 3, recompute=True)).splitlines() == [
        "IPU1: FWD.1 FWD.2 FWD.3 RECOMP.1 BWD.1 RECOMP.2 BWD.2 RECOMP.3 BWD.3",
        "IPU2: FWD.1 FWD.2 BWD.1 FWD.3 BWD.2 BWD.3",
    ]


def test_stages_sharing_an_ipu_add_up_in_a_slot_and_are_labelled():
    s = build_schedule("sequential", 2, 1, device_mapping=[0, 0])
    assert format_sequence(s) == "IPU1: S1:FWD.1 S2:FWD.1 S2:BWD.1 S1:BWD.1"
    shared = build_schedule("grouped", 2, 4, device_mapping=[0, 0])
    costs = [{"FWD": 1.0, "BWD": 2.0}] * 2
    # one IPU does all the work: no idle time, and slots hold both stages' work
    assert sum(slot_durations(shared, costs)) == 2 * 4 * 3.0 and bubble_share(shared, costs) == 0.0
