import logging

import numpy as np
import pytest

from ipu.specs import MK2_GC200
from ipu.io_tiles import io_overlaps, plan_io_tiles
from ipu.runtime.streams import ReplicaFeed


def test_overlap_rule():
    assert io_overlaps(32, 1, "interleaved")
    assert io_overlaps(32, 2, "grouped")
    assert not io_overlaps(32, 2, "interleaved")
    assert not io_overlaps(32, 4, "sequential")
    assert not io_overlaps(0, 1, "grouped")


def test_io_tile_budget_is_ninety_percent_of_their_memory():
    plan = plan_io_tiles(MK2_GC200, 32, batch_bytes=3 * 380 * 380 * 3, prefetch_micro_batches=3, ipus_per_replica=2,
                         schedule="grouped")
    assert plan.io_budget_bytes == int(32 * 624 * 1024 * 0.9)
    assert plan.compute_tiles == 1440 and plan.overlap
    with pytest.raises(ValueError, match="Out of memory on IO tiles.*use at least num_io_tiles=28"):
        plan_io_tiles(MK2_GC200, 16, 3 * 380 * 380 * 3 * 4, 3, 2, "grouped")


def test_warns_when_io_tiles_cannot_overlap(caplog):
    with caplog.at_level(logging.WARNING, logger="ipu.io_tiles"):
        plan = plan_io_tiles(MK2_GC200, 32, 1000, 3, 2, "interleaved")
    assert not plan.overlap
    assert "needs a single-IPU replica or the grouped pipeline schedule" in caplog.text


def test_a_replica_feed_hands_out_views_of_every_step_in_order():
    steps = [(np.full((3, 2, 4, 4, 1), s, np.uint8), np.full((3, 2), s)) for s in range(2)]
    feed = ReplicaFeed(steps)
    got = [feed.next() for _ in range(6)]
    assert feed.num_micro_batches == 3 and all(np.shares_memory(x, steps[i // 3][0]) for i, (x, _) in enumerate(got))
    assert [int(y[0]) for _, y in got] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(RuntimeError, match="read past the micro-batches"):
        feed.next()
    with pytest.raises(ValueError, match="uint8 images"):
        ReplicaFeed([(np.zeros((1, 2, 4, 4, 1), np.float32), np.zeros((1, 2)))])
