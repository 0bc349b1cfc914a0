"""The HDF5 layout of a dataset file, and the writer that produces it.

One file holds both splits::

    /                      attrs: format="poprun_py-images", format_version=1,
                                  num_classes (int), class_names (str [num_classes]),
                                  mean, std (float64 [C], pixel units 0..255, train split),
                                  source (str), licence (str)
    /train/images          uint8 [N, H, W, C], chunked (chunk_rows, H, W, C), fletcher32 by default
    /train/labels          int64 [N], values in [0, num_classes)
    /validation/images     same shapes for the validation split
    /validation/labels

Images are stored uncompressed by default: random reads of compressed chunks are slow
(see docs/data.md). Small files that the loader reads whole (the shipped Fashion-MNIST subset)
use gzip. By default every chunk carries a fletcher32 checksum so that a corrupted file fails
loudly. A checksum (like compression) makes HDF5 read whole chunks, so a file too large for RAM,
which the loader reads row by row, should be written with ``checksum=False`` (``--no-checksum``).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

import h5py
import numpy as np

FORMAT = "poprun_py-images"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")
IMAGES = "images"
LABELS = "labels"
REQUIRED_ATTRS = ("num_classes", "class_names", "mean", "std", "source", "licence")
COMPRESSIONS = ("none", "gzip")


class DatasetError(ValueError):
    """A dataset file that is missing, malformed or inconsistent; the message names the file."""


def channel_stats(sums: np.ndarray, squares: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std from running sums of pixels and of squared pixels."""
    mean = sums / count
    var = np.maximum(squares / count - mean**2, 0.0)
    return mean, np.sqrt(var)


class DatasetWriter:
    """Writes a dataset file block by block, then publishes it atomically.

    Rows go to ``<path>.<pid>.partial``; :meth:`close` checks that every row was written, stores the
    train split's channel mean/std and renames the file into place, so a crashed conversion
    never leaves a half-written file under the final name.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        image_shape: tuple[int, int, int],
        split_sizes: dict[str, int],
        class_names: list[str],
        source: str,
        licence: str,
        chunk_rows: int = 256,
        compression: str = "none",
        checksum: bool = True,
    ) -> None:
        if set(split_sizes) != set(SPLITS):
            raise ValueError(f"split_sizes must name exactly {SPLITS}, got {sorted(split_sizes)}")
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
        if min(split_sizes.values()) <= 0:
            raise ValueError(f"every split needs at least one sample, got {split_sizes}")
        self.path = Path(path)
        self._partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")  # one per writer process
        self._file = h5py.File(self._partial, "w")
        self._written = {split: 0 for split in SPLITS}
        self._sizes = dict(split_sizes)
        channels = image_shape[2]
        self._sums = np.zeros(channels, np.float64)
        self._squares = np.zeros(channels, np.float64)
        attrs = self._file.attrs
        attrs["format"], attrs["format_version"] = FORMAT, FORMAT_VERSION
        attrs["num_classes"] = len(class_names)
        attrs["class_names"] = np.array(class_names, dtype=h5py.string_dtype())
        attrs["source"], attrs["licence"] = source, licence
        for split, size in split_sizes.items():
            self._create_split(split, size, image_shape, chunk_rows, compression, checksum)

    def _create_split(self, split, size, image_shape, chunk_rows, compression, checksum) -> None:
        group = self._file.create_group(split)
        rows = max(1, min(chunk_rows, size))
        options = {"compression": "gzip", "compression_opts": 6, "shuffle": False} if compression == "gzip" else {}
        group.create_dataset(
            IMAGES, shape=(size, *image_shape), dtype=np.uint8,
            chunks=(rows, *image_shape), fletcher32=checksum, **options,
        )
        group.create_dataset(LABELS, shape=(size,), dtype=np.int64)

    def write(self, split: str, start: int, images: np.ndarray, labels: np.ndarray) -> None:
        """Write rows ``[start, start + len(images))`` of ``split``."""
        if images.dtype != np.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 [n, H, W, C], got {images.dtype} {images.shape}")
        stop = start + len(images)
        if len(labels) != len(images) or stop > self._sizes[split]:
            raise ValueError(f"rows [{start}, {stop}) with {len(labels)} labels do not fit split {split!r}")
        self._file[split][IMAGES][start:stop] = images
        self._file[split][LABELS][start:stop] = np.asarray(labels, dtype=np.int64)
        self._written[split] += len(images)
        if split == "train":
            pixels = images.reshape(-1, images.shape[-1]).astype(np.float64)
            self._sums += pixels.sum(axis=0)
            self._squares += (pixels * pixels).sum(axis=0)

    def close(self) -> Path:
        """Finish the file (mean/std attributes) and move it to its final path."""
        missing = {s: self._sizes[s] - n for s, n in self._written.items() if n != self._sizes[s]}
        if missing:
            self.abort()
            raise ValueError(f"{self.path}: rows not written (split: count): {missing}")
        count = self._written["train"] * self._file["train"][IMAGES].shape[1] * self._file["train"][IMAGES].shape[2]
        mean, std = channel_stats(self._sums, self._squares, count)
        self._file.attrs["mean"], self._file.attrs["std"] = mean, np.maximum(std, 1e-3)
        self._file.close()
        os.replace(self._partial, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        if self._file.id.valid:
            self._file.close()
        self._partial.unlink(missing_ok=True)

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()
