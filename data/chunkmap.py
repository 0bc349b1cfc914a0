"""Array views of an unfiltered, chunked HDF5 dataset through a memory map of the file.

Without filters, HDF5 stores each chunk as one contiguous C-order block at a byte offset that it
reports (``get_chunk_info``). When every chunk spans whole images (chunk shape ``(k, H, W, C)``),
the chunk is a plain ``[k, H, W, C]`` view of the mapped file, so a random batch is gathered with
``np.take`` straight from the OS page cache: no h5py call per row, no chunk cache, and only the pages
of the requested rows are touched. This is FFCV's ``os_cache`` idea applied to HDF5. Filtered files
(compression, checksums) cannot be viewed this way and use h5py reads instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np


class ChunkViews:
    """Per-chunk array views of one dataset; ``gather(rows, dst)`` copies rows into ``dst``."""

    def __init__(self, views: list[np.ndarray], chunk_rows: int) -> None:
        self._views = views
        self._chunk_rows = chunk_rows

    @classmethod
    def open(cls, path: Path, dataset: h5py.Dataset) -> "ChunkViews | None":
        """Views of ``dataset``'s chunks, or None when its storage cannot be viewed directly.

        Raises ``ValueError`` when a chunk lies beyond the end of the file (a truncated file:
        touching such a mapping would kill the process with SIGBUS instead of raising).
        """
        shape, chunks, dtype = dataset.shape, dataset.chunks, dataset.dtype
        if chunks is None or chunks[1:] != shape[1:] or not dtype.isnative:
            return None
        if dataset.id.get_create_plist().get_nfilters() > 0:
            return None
        chunk_rows = chunks[0]
        count = -(-shape[0] // chunk_rows)
        if dataset.id.get_num_chunks() != count:
            return None  # some chunks were never written
        chunk_bytes = int(np.prod(chunks)) * dtype.itemsize
        file_size = os.path.getsize(path)
        offsets = np.empty(count, np.int64)
        for index in range(count):
            info = dataset.id.get_chunk_info(index)
            if info.size != chunk_bytes:
                return None
            if info.byte_offset + info.size > file_size:
                raise ValueError(f"image chunk {index} ends at byte {info.byte_offset + info.size} "
                                 f"but the file has {file_size} bytes")
            offsets[info.chunk_offset[0] // chunk_rows] = info.byte_offset
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
        views = [np.ndarray(chunks, dtype=dtype, buffer=mapped, offset=int(offset)) for offset in offsets]
        return cls(views, chunk_rows)

    def gather(self, rows: np.ndarray, dst: np.ndarray) -> None:
        """``dst[i] = images[rows[i]]``: one ``np.take`` per chunk touched."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        chunk_ids = ordered // self._chunk_rows
        bounds = [0, *(np.flatnonzero(np.diff(chunk_ids)) + 1).tolist(), len(ordered)]
        for start, stop in zip(bounds[:-1], bounds[1:]):
            chunk = int(chunk_ids[start])
            local = ordered[start:stop] - chunk * self._chunk_rows
            dst[order[start:stop]] = np.take(self._views[chunk], local, axis=0)
