"""models.kernels.blas_buffers: the first pages of (what may be) OpenBLAS's work buffers get mapped, and
nothing in them changes."""

from __future__ import annotations

import ctypes
import mmap

import pytest

from models.kernels import blas_buffers

PAGE = mmap.PAGESIZE


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


class Region:
    """A private anonymous read-write mapping of ``size`` bytes that is one line of /proc/self/maps
    of its own: an inaccessible page on each side keeps the kernel from merging it with a
    neighbour that has the same flags."""

    def __init__(self, size: int) -> None:
        self.map = mmap.mmap(-1, size + 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        mprotect = ctypes.CDLL(None, use_errno=True).mprotect
        mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        for guard in (base, base + PAGE + size):
            assert mprotect(guard, PAGE, 0) == 0, ctypes.get_errno()  # PROT_NONE
        self.start, self.size = base + PAGE, size

    def __getitem__(self, index: slice) -> bytes:
        return self.map[index.start + PAGE:index.stop + PAGE]

    def __setitem__(self, index: slice, value: bytes) -> None:
        self.map[index.start + PAGE:index.stop + PAGE] = value

    def close(self) -> None:
        self.map.close()


def test_each_buffer_of_a_mapping_gets_its_first_pages_mapped_and_keeps_its_contents():
    size = 2 * blas_buffers.BUFFER_BYTES  # two neighbouring buffers show as one mapping
    region = Region(size)
    try:
        starts = blas_buffers.buffer_starts()
        assert region.start in starts and region.start + blas_buffers.BUFFER_BYTES in starts
        region[4096:4100] = b"keep"  # one page written, as a call would
        before = _resident_kib(region.start)
        done = blas_buffers.prefault(1 << 20)
        if done == 0:
            pytest.skip("madvise(MADV_POPULATE_WRITE) needs Linux 5.14 or later")
        assert _resident_kib(region.start) >= before + 2 * 1024 - 4  # 1 MiB more in each of the two buffers
        assert region[4096:4100] == b"keep" and region[0:4] == b"\0\0\0\0"
        assert region[size - 4:size] == b"\0\0\0\0"  # the rest is left alone (and reads as zeros)
    finally:
        region.close()


def test_a_mapping_that_is_not_whole_buffers_is_not_a_candidate():
    region = Region(blas_buffers.BUFFER_BYTES + PAGE)
    try:
        assert region.start not in blas_buffers.buffer_starts()
    finally:
        region.close()
