"""Mapping the first pages of OpenBLAS's work buffers up front.

OpenBLAS packs a product's operands into work buffers of its own (``BUFFER_SIZE``, 32 MiB on
x86-64 and arm64), reserved with ``mmap`` and taken from a pool by whichever thread calls; pages
a call never writes stay unmapped. Its kernels prefetch ahead of the packed panels, past the last
written page when a product is small, and a prefetch into an unmapped page does not fault it in:
it is dropped after a failed page walk, and so again on the next call, and the next. Under a
hypervisor such a walk is long.

Measured on a 2-core KVM guest (AMD EPYC Zen 1, numpy's OpenBLAS 0.3.31, Haswell kernels, one
thread): ``[128, 320] @ [320, 1000]`` (a classifier) took 7.3 ms per call, for good, until the
first megabytes of the buffer were mapped, then 2.6-3.0 ms; a tiny-G16-GN training step went from
131-136 to 109-117 ms. Until some larger product happened to write those pages, the slow state
lasted: what ``gemm._warm`` had found as a thread's "first products" of some shapes.

So once the threads that run products have computed one (and so taken their buffers), ``prefault``
maps the first ``PREFAULT_BYTES`` of each buffer with ``madvise(MADV_POPULATE_WRITE)`` (Linux
5.14+): only the page tables are filled, the contents stay as they are. The buffers are not named
anywhere, so every private anonymous read-write mapping of one to ``_MAX_BUFFERS`` whole buffers
counts (neighbouring buffers show as one mapping); one that is not OpenBLAS's costs its
``PREFAULT_BYTES`` of memory and nothing else. About 4 MiB of resident memory per buffer and a
millisecond, once. Elsewhere (no ``/proc``, an older kernel) it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import sys

logger = logging.getLogger(__name__)

BUFFER_BYTES = 32 << 20  # OpenBLAS's BUFFER_SIZE on x86-64 and arm64
PREFAULT_BYTES = 4 << 20
_MAX_BUFFERS = 8
_MADV_POPULATE_WRITE = 23


def buffer_starts(buffer_bytes: int = BUFFER_BYTES) -> list[int]:
    """Addresses where a work buffer may begin: every ``buffer_bytes`` step of each private
    anonymous read-write mapping that is 1 to ``_MAX_BUFFERS`` buffers long (none without
    ``/proc/self/maps``)."""
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 or fields[1][:2] != "rw" or fields[1][3] != "p":
                    continue  # backed by a file, the heap or a stack ([name]), or not private and writable
                start, end = (int(v, 16) for v in fields[0].split("-"))
                count, rest = divmod(end - start, buffer_bytes)
                if rest == 0 and 1 <= count <= _MAX_BUFFERS:
                    found += [start + i * buffer_bytes for i in range(count)]
    except OSError:
        return []
    return found


def prefault(prefault_bytes: int = PREFAULT_BYTES) -> int:
    """Map the first ``prefault_bytes`` of every possible work buffer; how many were mapped."""
    if not sys.platform.startswith("linux"):
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    done = 0
    for start in buffer_starts():
        if madvise(start, prefault_bytes, _MADV_POPULATE_WRITE) != 0:  # EINVAL before Linux 5.14
            logger.debug("madvise(MADV_POPULATE_WRITE) at %#x: errno %d", start, ctypes.get_errno())
            break
        done += 1
    return done
