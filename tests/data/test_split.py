"""The validation split carved from the training images: exact counts per class, determinism, disjointness,
and the test split as the file's held-out images."""

from __future__ import annotations

import numpy as np
import pytest

from data.dataset import open_dataset
from data.loader import BatchSpec, Loader
from data.sources import SHIPPED_SUBSET
from data.split import open_split, stratified_split
from tests.data.tiny_h5 import row_ids, write_tiny


def test_shipped_subset_carves_200_of_each_class():
    train = open_dataset(SHIPPED_SUBSET, "train")
    kept, held = stratified_split(train.labels, 0.2, 0)
    assert (len(kept), len(held)) == (8000, 2000)
    assert np.bincount(train.labels[held], minlength=10).tolist() == [200] * 10
    assert np.bincount(train.labels[kept], minlength=10).tolist() == [800] * 10
    assert np.intersect1d(kept, held).size == 0 and np.union1d(kept, held).tolist() == list(range(10000))
    again = stratified_split(train.labels, 0.2, 0)
    assert np.array_equal(again[1], held)  # a pure function of labels, fraction, seed
    other = stratified_split(train.labels, 0.2, 1)[1]
    assert not np.array_equal(other, held) and np.bincount(train.labels[other]).tolist() == [200] * 10
    train.close()


def test_uneven_classes_round_per_class():
    labels = np.array([0] * 7 + [1] * 3 + [2] * 10)
    kept, held = stratified_split(labels, 0.3, 5)
    assert np.bincount(labels[held]).tolist() == [2, 1, 3]  # round(2.1), round(0.9), round(3.0)
    assert len(kept) + len(held) == 20


@pytest.mark.parametrize("fraction", [0.0, 1.0, 0.01])
def test_a_fraction_that_empties_a_side_is_refused(fraction):
    with pytest.raises(ValueError, match="validation_fraction"):
        stratified_split(np.array([0, 0, 1, 1]), fraction, 0)


def test_open_split_reads_the_carved_rows_and_the_test_split(tmp_path):
    path = write_tiny(tmp_path / "t.h5", n_train=40, n_val=10, classes=4)
    train, val, test = (open_split(path, s, 0.3, 3) for s in ("train", "validation", "test"))
    assert (train.info.num_samples, val.info.num_samples, test.info.num_samples) == (28, 12, 10)
    assert (train.info.split, val.info.split, test.info.split) == ("train", "validation", "test")
    train_rows, val_rows = row_ids(train.read_all()), row_ids(val.read_all())
    assert np.intersect1d(train_rows, val_rows).size == 0 and len(np.union1d(train_rows, val_rows)) == 40
    assert np.array_equal(val.labels, val_rows % 4)
    assert np.bincount(val.labels).tolist() == [3] * 4  # 0.3 of each class's 10
    assert row_ids(test.read_all()).tolist() == list(range(10))  # the file's held-out split, whole
    loader = Loader(train, BatchSpec(micro_batch=4), seed=1, prefetch_batches=0, cache="stream")
    seen = np.concatenate([row_ids(b.images).ravel() for b in loader])
    assert sorted(seen.tolist()) == sorted(train_rows.tolist())  # an epoch visits exactly the kept rows
    for d in (train, val, test):
        d.close()


def test_no_carve_keeps_the_files_splits_and_refuses_a_test_split(tmp_path):
    path = write_tiny(tmp_path / "t.h5")
    assert open_split(path, "validation").info.num_samples == 10
    with pytest.raises(ValueError, match="validation_fraction > 0"):
        open_split(path, "test")
