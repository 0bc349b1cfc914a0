"""Converters from IDX files, image folders and the synthetic generator to the HDF5 layout.

Each converter takes an optional ``progress`` bar (anything with ``update(n)`` and a settable
``total``, such as a ``tqdm`` instance): its total is set to the image count, then it is updated after
every block written. The CLI owns the bar, so this module imports no progress library.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np

from data.idx import read_idx
from data.images import list_classes, list_images, load_image
from data.layout import DatasetWriter
from data.synthetic import SyntheticSpec, synthetic_block

class ProgressBar(Protocol):
    total: int | None

    def update(self, n: int) -> object: ...


Progress = ProgressBar | None

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
FASHION_MNIST_SOURCE = ("Fashion-MNIST, Zalando Research, https://github.com/zalandoresearch/fashion-mnist "
                        "(Xiao, Rasul, Vollgraf 2017, arXiv:1708.07747); files from Debian dataset-fashion-mnist")
FASHION_MNIST_LICENCE = ("MIT (Expat). Copyright (c) 2017 Zalando SE, https://tech.zalando.com. Permission is "
                         "hereby granted, free of charge, to any person obtaining a copy of this software and "
                         "associated documentation files, to deal in them without restriction, provided the "
                         "copyright notice and this permission notice are included. Provided AS IS, without "
                         "warranty of any kind.")
IDX_NAMES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "validation": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def _start(progress: Progress, sizes: dict[str, int]) -> None:
    if progress is not None:
        progress.total = sum(sizes.values())


def _write_blocks(writer: DatasetWriter, split: str, blocks: Iterator[tuple[np.ndarray, np.ndarray]],
                  progress: Progress) -> None:
    start = 0
    for images, labels in blocks:
        writer.write(split, start, images, labels)
        start += len(images)
        if progress is not None:
            progress.update(len(images))


def _find_idx(folder: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder}: no {stem} or {stem}.gz (expected the standard MNIST file names)")


def balanced_subset(labels: np.ndarray, limit: int | None, num_classes: int) -> np.ndarray:
    """Indices of the first ``limit // num_classes`` samples of each class, in file order."""
    if limit is None or limit >= len(labels):
        return np.arange(len(labels))
    per_class = limit // num_classes
    if per_class == 0:
        raise ValueError(f"limit {limit} is smaller than the class count {num_classes}")
    keep = np.concatenate([np.flatnonzero(labels == k)[:per_class] for k in range(num_classes)])
    return np.sort(keep)


def read_idx_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, H, W, 1] and labels of one split of an MNIST-format folder."""
    image_stem, label_stem = IDX_NAMES[split]
    image_path, label_path = _find_idx(folder, image_stem), _find_idx(folder, label_stem)
    images, labels = read_idx(image_path), read_idx(label_path).astype(np.int64)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"{image_path} {images.shape} and {label_path} {labels.shape} do not pair up")
    return images[..., None], labels


def _ignore_interrupts() -> None:
    """Decoding workers leave Ctrl-C to the parent, which stops them and removes the partial file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def convert_idx(folder: str | os.PathLike, out: str | os.PathLike, *, class_names: tuple[str, ...] | None = None,
                source: str = "", licence: str = "unknown", train_limit: int | None = None, val_limit: int | None = None,
                chunk_rows: int = 1024, compression: str = "none", checksum: bool = True,
                progress: Progress = None) -> Path:
    """MNIST-format IDX files (train-* and t10k-*, gzip or not) to a dataset file.

    ``train_limit``/``val_limit`` keep a class-balanced subset (the first samples of each class).
    Without ``class_names`` the classes are named by their index (``"0"``, ``"1"``, ...).
    """
    folder = Path(folder)
    read = {split: read_idx_split(folder, split) for split in ("train", "validation")}
    if class_names is None:
        class_names = tuple(str(k) for k in range(1 + max(int(labels.max()) for _, labels in read.values())))
    splits = {}
    for split, limit in (("train", train_limit), ("validation", val_limit)):
        images, labels = read[split]
        if labels.max() >= len(class_names):
            raise ValueError(f"{folder}: label {labels.max()} but only {len(class_names)} class names")
        keep = balanced_subset(labels, limit, len(class_names))
        splits[split] = (images[keep], labels[keep])
    sizes = {split: len(labels) for split, (_, labels) in splits.items()}
    _start(progress, sizes)
    with DatasetWriter(out, image_shape=splits["train"][0].shape[1:], split_sizes=sizes,
                       class_names=list(class_names), source=source, licence=licence,
                       chunk_rows=chunk_rows, compression=compression, checksum=checksum) as writer:
        for split, (images, labels) in splits.items():
            blocks = ((images[i:i + chunk_rows], labels[i:i + chunk_rows]) for i in range(0, len(labels), chunk_rows))
            _write_blocks(writer, split, blocks, progress)
    return Path(out)


def convert_synthetic(out: str | os.PathLike, *, train: SyntheticSpec, val_samples: int,
                      chunk_rows: int = 256, compression: str = "none", checksum: bool = True,
                      progress: Progress = None) -> Path:
    """A class-dependent synthetic dataset (see :mod:`data.synthetic`) of any size and resolution."""
    specs = {"train": train, "validation": SyntheticSpec(val_samples, train.height, train.width,
                                                         train.channels, train.num_classes, train.seed, train.noise)}
    names = [f"class_{k}" for k in range(train.num_classes)]
    sizes = {split: spec.num_samples for split, spec in specs.items()}
    _start(progress, sizes)
    with DatasetWriter(out, image_shape=(train.height, train.width, train.channels), split_sizes=sizes,
                       class_names=names, source=f"synthetic (data.synthetic, seed {train.seed})",
                       licence="generated; no restrictions", chunk_rows=chunk_rows,
                       compression=compression, checksum=checksum) as writer:
        for split_seed, (split, spec) in enumerate(specs.items()):
            blocks = (synthetic_block(spec, i, min(i + chunk_rows, spec.num_samples), split_seed)
                      for i in range(0, spec.num_samples, chunk_rows))
            _write_blocks(writer, split, blocks, progress)
    return Path(out)


def _image_split_files(root: Path, val_fraction: float) -> tuple[list[str], dict]:
    """Class names and ``{split: (files, labels)}``: from train/ + val/ folders, or a held-out fraction."""
    split_dirs = {"train": root / "train", "validation": next(
        (root / n for n in ("val", "validation") if (root / n).is_dir()), None)}
    if split_dirs["train"].is_dir() and split_dirs["validation"] is not None:
        classes = list_classes(split_dirs["train"])
        return classes, {split: list_images(d, classes, every_class=split == "train")
                         for split, d in split_dirs.items()}
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"--val-fraction must be in (0, 1) when {root} has no train/ and val/ folders")
    classes = list_classes(root)
    files, labels = list_images(root, classes)
    every = max(2, round(1.0 / val_fraction))
    held = (np.arange(len(files)) % every) == every - 1
    pick = lambda mask: ([f for f, m in zip(files, mask) if m], labels[mask])  # noqa: E731
    return classes, {"train": pick(~held), "validation": pick(held)}


def convert_images(root: str | os.PathLike, out: str | os.PathLike, *, size: int, val_fraction: float = 0.1,
                   workers: int | None = None, chunk_rows: int = 256, source: str = "", licence: str = "unknown",
                   checksum: bool = True, progress: Progress = None) -> Path:
    """A folder of class sub-folders of JPEG/PNG images to a dataset file, decoded in parallel.

    If ``root`` has ``train/`` and ``val/`` (or ``validation/``) sub-folders they are the splits;
    otherwise every ``round(1/val_fraction)``-th image of each class is held out for validation.
    """
    root = Path(root)
    if size <= 0:
        raise ValueError(f"--size must be positive, got {size}")
    classes, splits = _image_split_files(root, val_fraction)
    sizes = {split: len(files) for split, (files, _) in splits.items()}
    _start(progress, sizes)
    load = partial(load_image, size=size)
    with DatasetWriter(out, image_shape=(size, size, 3), split_sizes=sizes, class_names=classes,
                       source=source or f"image folder {root}", licence=licence, chunk_rows=chunk_rows,
                       checksum=checksum) as writer, \
            ProcessPoolExecutor(max_workers=workers or os.cpu_count(), initializer=_ignore_interrupts) as pool:
        for split, (files, labels) in splits.items():
            def blocks(files=files, labels=labels):
                for i in range(0, len(files), chunk_rows):
                    batch = list(pool.map(load, files[i:i + chunk_rows], chunksize=8))
                    yield np.stack(batch), labels[i:i + chunk_rows]
            _write_blocks(writer, split, blocks(), progress)
    return Path(out)
