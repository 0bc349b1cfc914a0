"""Tiny dataset files for the data tests (imported as a plain module: tests/ has no packages)."""

from __future__ import annotations

import numpy as np

from data.layout import DatasetWriter


def write_tiny(path, n_train=40, n_val=10, shape=(6, 5, 3), classes=4, chunk_rows=8, compression="none",
               checksum=True):
    """A dataset whose image i of a split is filled with (i % 251) and whose label is i % classes."""
    sizes = {"train": n_train, "validation": n_val}
    with DatasetWriter(path, image_shape=shape, split_sizes=sizes, class_names=[f"c{k}" for k in range(classes)],
                       source="test fixture", licence="none", chunk_rows=chunk_rows,
                       compression=compression, checksum=checksum) as writer:
        for split, n in sizes.items():
            ids = np.arange(n)
            images = np.broadcast_to((ids % 251).astype(np.uint8)[:, None, None, None], (n, *shape)).copy()
            images[:, 0, 0, 0] = (ids // 251).astype(np.uint8)  # keeps rows distinct beyond 251
            writer.write(split, 0, images, ids % classes)
    return path


def row_ids(images: np.ndarray) -> np.ndarray:
    """Recover the row index that write_tiny encoded in each image (any leading shape)."""
    return images[..., 0, 1, 0].astype(np.int64) + 251 * images[..., 0, 0, 0].astype(np.int64)
