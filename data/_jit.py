"""The one switch between numba and plain Python for every kernel in ``data/``.

Kernels are written once as ordinary Python over numpy arrays and compiled through :func:`jit`.
Set ``POPRUN_JIT=0`` (the same switch as ``models/``) to run them uncompiled (slow, but steppable in a debugger).
Compiled kernels release the GIL (``nogil=True``) so that the loader thread overlaps with the
training thread, and are cached on disk so that a second process does not recompile them.
"""

from __future__ import annotations

import os
from typing import Callable

import numba

_ENABLED = os.environ.get("POPRUN_JIT", "1") not in ("0", "false", "no")


def is_enabled() -> bool:
    """True when the kernels are compiled with numba."""
    return _ENABLED


def jit(fn: Callable) -> Callable:
    """Compile ``fn`` with numba (``nogil``, cached), or return it unchanged when disabled."""
    if not _ENABLED:
        return fn
    return numba.njit(nogil=True, cache=True, error_model="numpy")(fn)
