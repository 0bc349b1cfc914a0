"""A validation split carved from a file's training images, and the file's own held-out split as the test split.

A dataset file holds ``train`` and ``validation`` (see :mod:`data.layout`); for Fashion-MNIST the latter
is the official test set. Choosing hyperparameters on it and reporting it as well measures the choice,
not the model. With ``validation_fraction > 0`` the run therefore uses three splits:

* **train**: the training images not held out,
* **validation**: ``validation_fraction`` of each class of the training images, drawn with ``split_seed``
  (stratified: every class gives ``round(fraction x its count)`` images), for every choice,
* **test**: the file's ``validation`` split, untouched, evaluated only where asked for (``run.evaluate_test``).

The carve is a pure function of the labels, the fraction and the seed: the same rows on every machine
and every instance. :class:`Subset` is a split of an open :class:`~data.dataset.Dataset` restricted to
some of its rows, with the interface the loader reads.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from data.dataset import Dataset, DatasetInfo, open_dataset

SPLIT_NAMES = ("train", "validation", "test")


def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept rows, held-out rows), each sorted: ``round(fraction * n_c)`` rows of every class ``c`` held out,
    chosen by a permutation seeded with ``(seed, c)``."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"data.validation_fraction={fraction!r} must be in (0, 1) to carve a validation split "
                         "(0 evaluates on the file's validation split)")
    if seed < 0:
        raise ValueError(f"data.split_seed={seed!r} must be >= 0")
    labels = np.asarray(labels, np.int64)
    held = []
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        count = int(round(fraction * len(rows)))
        if count == 0 or count == len(rows):
            raise ValueError(f"data.validation_fraction={fraction!r} holds out {count} of the {len(rows)} images of "
                             f"class {c}: choose a fraction that leaves images on both sides of every class")
        held.append(np.random.default_rng([seed, int(c)]).permutation(rows)[:count])
    out = np.sort(np.concatenate(held))
    mask = np.ones(len(labels), bool)
    mask[out] = False
    return np.flatnonzero(mask), out


class Subset:
    """Rows ``rows`` of ``base`` (sorted, unique) as a dataset of their own: ``read_rows`` and ``labels`` index
    the subset, ``info`` counts its rows and names it ``split``. Closing it closes ``base``."""

    def __init__(self, base: Dataset, rows: np.ndarray, split: str) -> None:
        self.base = base
        self.rows = np.asarray(rows, np.int64)
        self.labels = base.labels[self.rows]
        self.info: DatasetInfo = replace(base.info, split=split, num_samples=len(self.rows))

    @property
    def dtype(self) -> np.dtype:
        return self.base.dtype

    def read_rows(self, rows: np.ndarray, dst: np.ndarray) -> None:
        self.base.read_rows(self.rows[np.asarray(rows, np.int64)], dst)

    def read_all(self) -> np.ndarray:
        out = np.empty((len(self.rows), *self.info.image_shape), self.dtype)
        self.base.read_rows(self.rows, out)
        return out

    def close(self) -> None:
        self.base.close()

    def __repr__(self) -> str:
        return f"Subset({str(self.info.path)!r}, split={self.info.split!r}, n={len(self.rows)} of {self.base.info.num_samples})"


def open_split(path, split: str, validation_fraction: float = 0.0, split_seed: int = 0) -> Dataset | Subset:
    """``split`` (train, validation or test) of the dataset file ``path``.

    With ``validation_fraction`` 0 the file's splits are used as they are (``test`` is then refused: the
    validation split is the file's held-out split already). Otherwise train and validation are carved
    from the file's ``train`` (:func:`stratified_split`) and ``test`` is the file's ``validation``.
    """
    if split not in SPLIT_NAMES:
        raise ValueError(f"split must be one of {SPLIT_NAMES}, got {split!r}")
    if not validation_fraction:
        if split == "test":
            raise ValueError("a test split needs data.validation_fraction > 0: without a carved validation split the "
                             "file's held-out images are the validation split already")
        return open_dataset(path, split)
    if split == "test":
        held = open_dataset(path, "validation")
        return Subset(held, np.arange(held.info.num_samples), "test")
    base = open_dataset(path, "train")
    try:
        kept, held = stratified_split(base.labels, validation_fraction, split_seed)
    except BaseException:
        base.close()
        raise
    return Subset(base, kept if split == "train" else held, split)


def split_description(validation_fraction: float, split_seed: int) -> str:
    """How a run's splits were made, in words (logs, study reports)."""
    if not validation_fraction:
        return "the file's train and validation splits (no test split)"
    return (f"validation: {validation_fraction:g} of each class of the file's training images (split seed {split_seed}); "
            "train: the rest; test: the file's validation split")


__all__ = ["SPLIT_NAMES", "Subset", "open_split", "split_description", "stratified_split"]
