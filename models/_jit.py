"""The one switch between numba-compiled and plain-Python kernels, and the thread policy.

Every hot kernel in ``models/`` is written once as plain Python over numpy arrays and
wrapped with :func:`jit`. Set ``POPRUN_JIT=0`` (the same switch as ``data/``) to run them uncompiled (slow, but handy
under a debugger); ``prange`` then degrades to ``range``.

Parallel kernels run on up to :func:`set_num_threads` threads (default: numba's, i.e.
``NUMBA_NUM_THREADS`` or the core count), but on one thread when their first array is smaller
than ``PARALLEL_MIN_ELEMS``: a parallel region costs a barrier, and on a busy machine (several
simulated replicas per host) a barrier waits for a descheduled thread.
"""

from __future__ import annotations

import functools
import os

import numba

ENABLED = os.environ.get("POPRUN_JIT", "1") not in ("0", "false", "no")
PARALLEL_MIN_ELEMS = 1 << 17
_max_threads = numba.config.NUMBA_NUM_THREADS


def is_enabled() -> bool:
    """Whether kernels are compiled with numba."""
    return ENABLED


def set_num_threads(n: int) -> None:
    """Threads for the parallel kernels of ``models/`` (at most ``NUMBA_NUM_THREADS``)."""
    global _max_threads
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"set_num_threads({n}): must be in [1, {numba.config.NUMBA_NUM_THREADS}] "
                         f"(raise NUMBA_NUM_THREADS before starting Python for more)")
    _max_threads = n


def get_num_threads() -> int:
    return _max_threads


def jit(parallel: bool = False):
    """Compile a kernel with numba (nopython, cached, no fastmath, numpy error model)."""

    def wrap(fn):
        if not ENABLED:
            return fn
        compiled = numba.njit(cache=True, parallel=parallel, fastmath=False, nogil=True,
                              error_model="numpy")(fn)
        if not parallel:
            return compiled

        @functools.wraps(fn)
        def launch(*args):
            numba.set_num_threads(1 if args[0].size < PARALLEL_MIN_ELEMS else _max_threads)
            return compiled(*args)

        launch.compiled = compiled
        return launch

    return wrap


prange = numba.prange if ENABLED else range
