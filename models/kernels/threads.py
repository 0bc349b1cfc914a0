"""The thread policy of the parallel kernels in ``models/``, on top of the project's numba switch.

Every hot kernel in ``models/`` is written once as plain Python over numpy arrays and wrapped
with :func:`compiled_kernel`, which compiles through the :mod:`jit` package (the one owner of ``POPRUN_JIT``:
set it to 0 to run every kernel uncompiled; ``prange`` then degrades to ``range``).

Parallel kernels run on up to :func:`set_num_threads` threads (default: numba's, i.e.
``NUMBA_NUM_THREADS`` or the core count), but on one thread when their first array is smaller
than ``PARALLEL_MIN_ELEMS``: a parallel region costs a barrier, and on a busy machine (several
simulated replicas per host) a barrier waits for a descheduled thread.

Vectorisation: numba runs LLVM's loop vectoriser but leaves its SLP (straight-line) vectoriser
off; the register-blocked kernels (``direct_conv``) need it, because their fully
unrolled ``TILE x VEC`` accumulators only become vector registers through SLP packing. It is
switched on here, for the compilations this process makes (SLP packs independent operations
and reorders nothing, so results are bit-identical with it off). ``CONTRACT`` is the one
fast-math flag kernels may opt into: fusing ``a*b + c`` into an FMA (one rounding instead of
two), as BLAS does.
"""

from __future__ import annotations

import functools
import threading

import numba

import jit as _compiler
from jit import ENABLED

PARALLEL_MIN_ELEMS = 1 << 17
_max_threads = numba.config.NUMBA_NUM_THREADS
CONTRACT = frozenset({"contract"})
numba.config.SLP_VECTORIZE = 1


def set_num_threads(n: int) -> None:
    """Threads for the parallel kernels of ``models/`` (at most ``NUMBA_NUM_THREADS``)."""
    global _max_threads
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"set_num_threads({n}): must be in [1, {numba.config.NUMBA_NUM_THREADS}] "
                         f"(raise NUMBA_NUM_THREADS before starting Python for more)")
    _max_threads = n


def get_num_threads() -> int:
    return _max_threads


_in_use = threading.local()  # the count this Python thread last gave numba


def use_threads(n: int) -> None:
    """``numba.set_num_threads(n)`` for the calling thread, skipped when ``n`` is already set (a
    step launches thousands of kernels; numba's call costs microseconds each). Every kernel
    launch in ``models/`` goes through here, so the remembered count is the real one."""
    if getattr(_in_use, "n", 0) != n:
        numba.set_num_threads(n)
        _in_use.n = n


def compiled_kernel(parallel: bool = False, fastmath: frozenset = frozenset(), min_elems: int = PARALLEL_MIN_ELEMS):
    """Compile a kernel (``jit.jit``; ``fastmath`` empty, strict IEEE, or ``CONTRACT``); a
    parallel one runs on one thread when its first array has fewer than ``min_elems`` elements
    (0 for kernels that do much work per element)."""

    def wrap(fn):
        if not ENABLED:
            return fn
        compiled = _compiler.jit(fn, parallel=parallel, fastmath=fastmath)
        if not parallel:
            return compiled

        @functools.wraps(fn)
        def launch(*args):
            use_threads(1 if args[0].size < min_elems else _max_threads)
            return compiled(*args)

        launch.compiled = compiled
        return launch

    return wrap


__all__ = ["CONTRACT", "PARALLEL_MIN_ELEMS", "compiled_kernel", "get_num_threads", "set_num_threads", "use_threads"]
