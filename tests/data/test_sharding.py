import numpy as np
import pytest

from data.sharding import (epoch_order, global_batch_rows, hash3, replica_slice, shard_for, splitmix64,
                           steps_per_epoch, uniform)


def test_splitmix64_matches_the_reference_sequence():
    # splitmix64 seeded with 0: first outputs 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4 (Vigna's splitmix64.c).
    assert int(splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    assert int(splitmix64(np.uint64(0x9E3779B97F4A7C15))) == 0x6E789E6AA1B965F4


def test_epoch_order_exact_values_pin_the_permutation():
    assert epoch_order(10, 0, 0).tolist() == [6, 2, 9, 4, 7, 1, 8, 5, 3, 0]
    assert epoch_order(10, 0, 1).tolist() == [8, 5, 9, 1, 7, 0, 3, 2, 4, 6]
    assert epoch_order(10, 1, 0).tolist() == [0, 8, 9, 2, 5, 4, 1, 7, 6, 3]


def test_epoch_order_is_a_pure_permutation():
    a = epoch_order(1000, 7, 3)
    assert sorted(a.tolist()) == list(range(1000))
    assert np.array_equal(a, epoch_order(1000, 7, 3))
    assert not np.array_equal(a, epoch_order(1000, 7, 4))
    assert epoch_order(0, 0, 0).tolist() == [] and epoch_order(1, 5, 5).tolist() == [0]


def test_uniform_is_in_unit_interval_and_roughly_flat():
    key = np.uint64(hash3(1, 2, 3))
    draws = np.array([uniform(key, i) for i in range(4000)])
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.02


@pytest.mark.parametrize("n, g, drop, steps", [(10, 4, True, 2), (10, 4, False, 3), (8, 4, True, 2),
                                               (8, 4, False, 2), (3, 4, True, 0), (3, 4, False, 1)])
def test_steps_per_epoch(n, g, drop, steps):
    assert steps_per_epoch(n, g, drop) == steps


def test_global_batches_pad_and_mask_exact():
    order = np.array([4, 0, 3, 1, 2])
    rows, mask = global_batch_rows(order, 2, 2, drop_remainder=False)
    assert rows.tolist() == [2, 4] and mask.tolist() == [True, False]
    rows, mask = global_batch_rows(order, 4, 1, drop_remainder=False)
    assert rows.tolist() == [2, 4, 0, 3] and mask.tolist() == [True, False, False, False]
    rows, mask = global_batch_rows(np.array([1, 0]), 5, 0, drop_remainder=False)  # shorter than one batch
    assert rows.tolist() == [1, 0, 1, 0, 1] and mask.tolist() == [True, True, False, False, False]
    with pytest.raises(ValueError, match="outside the epoch"):
        global_batch_rows(order, 2, 2, drop_remainder=True)


@pytest.mark.parametrize("drop", [True, False])
def test_every_sample_exactly_once_per_epoch(drop):
    n, g = 23, 6
    order = epoch_order(n, 3, 1)
    seen = []
    for step in range(steps_per_epoch(n, g, drop)):
        rows, mask = global_batch_rows(order, g, step, drop)
        seen += rows[mask].tolist()
    expected = order[: (n // g) * g] if drop else order
    assert sorted(seen) == sorted(expected.tolist()) and len(set(seen)) == len(seen)


def test_replica_and_instance_slices_exact():
    assert replica_slice(0, 2, 3) == slice(0, 6)
    assert replica_slice(3, 2, 3) == slice(18, 24)
    assert shard_for(0, 2, 2, 2, 3) == slice(0, 12)
    assert shard_for(1, 2, 2, 2, 3) == slice(12, 24)
    with pytest.raises(ValueError, match="instance index 2"):
        shard_for(2, 2, 1, 1, 1)


@pytest.mark.parametrize("instances, local", [(1, 4), (2, 2), (4, 1)])
def test_replica_slices_concatenate_to_the_global_batch(instances, local):
    accum, micro = 2, 3
    batch = np.arange(4 * accum * micro) * 10
    parts = [batch[shard_for(i, instances, local, accum, micro)] for i in range(instances)]
    assert np.array_equal(np.concatenate(parts), batch)
    per_replica = np.concatenate(parts).reshape(4, accum, micro)
    for r in range(4):
        assert np.array_equal(per_replica[r].ravel(), batch[replica_slice(r, accum, micro)])
