"""models._blas_buffers: the first pages of (what may be) OpenBLAS's work buffers get mapped, and
nothing in them changes."""

from __future__ import annotations

import ctypes
import mmap

import pytest

from models import _blas_buffers

# MAP_NORESERVE (Linux): a mapping with other flags than its neighbours never merges with them,
# so the test's region is one line of /proc/self/maps of its own.
PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000


def _resident_kib(start: int) -> int:
    """Rss of the mapping that begins at ``start`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split()[0] and not line.startswith(("Rss", "Size")):
                inside = int(line.split("-")[0], 16) == start
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1])
    raise AssertionError(f"no mapping starts at {start:#x}")


def test_each_buffer_of_a_mapping_gets_its_first_pages_mapped_and_keeps_its_contents():
    size = 2 * _blas_buffers.BUFFER_BYTES  # two neighbouring buffers show as one mapping
    region = mmap.mmap(-1, size, flags=PRIVATE)
    try:
        start = ctypes.addressof(ctypes.c_char.from_buffer(region))
        starts = _blas_buffers.buffer_starts()
        assert start in starts and start + _blas_buffers.BUFFER_BYTES in starts
        region[4096:4100] = b"keep"  # one page written, as a call would
        before = _resident_kib(start)
        done = _blas_buffers.prefault(1 << 20)
        if done == 0:
            pytest.skip("madvise(MADV_POPULATE_WRITE) needs Linux 5.14 or later")
        assert _resident_kib(start) >= before + 2 * 1024 - 4  # 1 MiB more in each of the two buffers
        assert region[4096:4100] == b"keep" and region[0:4] == b"\0\0\0\0"
        assert region[size - 4:] == b"\0\0\0\0"  # the rest is left alone (and reads as zeros)
    finally:
        region.close()


def test_a_mapping_that_is_not_whole_buffers_is_not_a_candidate():
    region = mmap.mmap(-1, _blas_buffers.BUFFER_BYTES + 4096, flags=PRIVATE)
    try:
        start = ctypes.addressof(ctypes.c_char.from_buffer(region))
        assert start not in _blas_buffers.buffer_starts()
    finally:
        region.close()
