"""The one switch between numba-compiled and plain-Python kernels.

Every hot kernel in ``models/`` is written once as plain Python over numpy arrays and
wrapped with :func:`jit`. Set ``POPRUN_PY_NO_JIT=1`` to run them uncompiled (slow, but handy
under a debugger); ``prange`` then degrades to ``range``.
"""

from __future__ import annotations

import os

import numba

ENABLED = os.environ.get("POPRUN_PY_NO_JIT", "0") not in ("1", "true", "yes")


def is_enabled() -> bool:
    """Whether kernels are compiled with numba."""
    return ENABLED


def jit(parallel: bool = False):
    """Compile a kernel with numba (nopython, cached, fastmath off) when enabled."""

    def wrap(fn):
        if not ENABLED:
            return fn
        return numba.njit(cache=True, parallel=parallel, fastmath=False, nogil=True)(fn)

    return wrap


prange = numba.prange if ENABLED else range
