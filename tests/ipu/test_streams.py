import logging

import numpy as np
import pytest

from ipu.specs import MK2_GC200
from ipu.io_tiles import io_overlaps, plan_io_tiles
from ipu.runtime.streams import InfeedQueue, OutfeedQueue, run_device_iterations


def _batches(n, shape=(2, 4, 4, 3)):
    for i in range(n):
        yield np.full(shape, i, np.uint8), np.array([i, i])


def test_infeed_takes_uint8_up_to_the_prefetch_depth():
    q = InfeedQueue((2, 4, 4, 3), prefetch_depth=2)
    assert q.fill_from(_batches(5)) == 2 and q.full()
    with pytest.raises(RuntimeError, match="infeed is full"):
        q.put(np.zeros((2, 4, 4, 3), np.uint8), np.zeros(2))
    assert q.get()[0][0, 0, 0, 0] == 0
    with pytest.raises(ValueError, match="uint8 images"):
        q.put(np.zeros((2, 4, 4, 3), np.float32), np.zeros(2))
    with pytest.raises(ValueError, match=r"shape \(2, 4, 4, 3\)"):
        q.put(np.zeros((1, 4, 4, 3), np.uint8), np.zeros(1))


def test_device_iterations_run_several_steps_per_host_call():
    infeed, outfeed = InfeedQueue((2, 4, 4, 3), 3), OutfeedQueue()
    source = _batches(10)
    seen = []

    def step(images, labels):
        seen.append(int(images[0, 0, 0, 0]))
        return {"loss": float(labels.sum())}

    first = run_device_iterations(step, infeed, outfeed, source, 4)
    second = run_device_iterations(step, infeed, outfeed, source, 4)
    assert [m["loss"] for m in first] == [0.0, 2.0, 4.0, 6.0]
    assert len(second) == 4 and seen == list(range(8))
    assert infeed.bytes_in == 10 * (96 + 16)  # 8 consumed + 2 prefetched


def test_overlap_rule():
    assert io_overlaps(32, 1, "interleaved")
    assert io_overlaps(32, 2, "grouped")
    assert not io_overlaps(32, 2, "interleaved")
    assert not io_overlaps(32, 4, "sequential")
    assert not io_overlaps(0, 1, "grouped")


def test_io_tile_budget_is_ninety_percent_of_their_memory():
    plan = plan_io_tiles(MK2_GC200, 32, batch_bytes=3 * 380 * 380 * 3, prefetch_depth=3, ipus_per_replica=2,
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


def test_replica_feed_prefetches_across_steps_without_copying():
    from ipu.runtime.streams import ReplicaFeed

    steps = [(np.full((3, 2, 4, 4, 1), s, np.uint8), np.full((3, 2), s)) for s in range(2)]
    feed = ReplicaFeed(prefetch_depth=2)
    feed.load(steps)
    got = [feed.next() for _ in range(3)]  # step 0's three micro-batches
    assert feed.num_micro_batches == 3 and all(np.shares_memory(x, steps[0][0]) for x, _ in got)
    assert len(feed.infeed) == 1 and int(feed.infeed._items[0][0][0, 0, 0, 0]) == 1  # step 1 already queued
    with pytest.raises(RuntimeError, match="still holds 1 micro-batches"):
        feed.load(steps)
    assert [int(feed.next()[1][0]) for _ in range(3)] == [1, 1, 1]
