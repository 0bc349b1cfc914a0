"""BLAS matrix products called from a numba parallel loop, so that they run on numba's threads.

The layers' other kernels run on numba's OpenMP threads, which spin for a while after each
parallel region; products split over a separate pool of Python threads then compete with those
spinning threads for the same cores (measured on 2 cores: the 1x1 convolutions of a B4-G16
step took 1.5x longer than with a passive OpenMP wait policy). Here each numba thread calls
single-threaded ``cblas_?gemm`` on its block of rows (or columns) of the product, so one set of
threads does all the work.

The symbols are looked up in numpy's own OpenBLAS (the 64-bit-integer build that numpy's wheels
ship, ``scipy_cblas_sgemm64_`` / ``cblas_sgemm64_``) and registered with LLVM under fixed names,
which keeps the kernel cacheable. :func:`bind` returns False when no such library is loaded;
``gemm`` then keeps its Python thread pool.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba.core import types

import jit as _compiler
from jit import ENABLED, prange

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_NAMES = {"sgemm": "poprun_models_sgemm64", "dgemm": "poprun_models_dgemm64"}
_PREFIXES = ("scipy_cblas_", "cblas_")  # with the ILP64 suffix "64_"


def _declare(name: str, real) -> types.ExternalFunction:
    i64, i32, ptr = types.int64, types.int32, types.intp
    return types.ExternalFunction(name, types.void(i32, i32, i32, i64, i64, i64, real, ptr, i64, ptr, i64, real,
                                                   ptr, i64))


_sgemm = _declare(_NAMES["sgemm"], types.float32)
_dgemm = _declare(_NAMES["dgemm"], types.float64)
_bound = False


def bind(lib: ctypes.CDLL) -> bool:
    """Register ``lib``'s ILP64 ``cblas_sgemm``/``cblas_dgemm``; False when it has none."""
    global _bound
    if _bound:
        return True
    for prefix in _PREFIXES:
        fns = {op: getattr(lib, f"{prefix}{op}64_", None) for op in _NAMES}
        if ENABLED and all(fn is not None for fn in fns.values()):
            from llvmlite import binding  # numba's own LLVM binding

            for op, fn in fns.items():
                binding.add_symbol(_NAMES[op], ctypes.cast(fn, ctypes.c_void_p).value)
            _bound = True
            return True
    return False


@_compiler.jit(parallel=True)
def gemm(double, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, parts, by_columns):
    """c = op(a) @ op(b) (row-major, ``op`` per ``ta``/``tb``; a, b, c are data addresses with
    leading dimensions), in ``parts`` blocks of rows of c (or of columns, ``by_columns``), one
    BLAS call per block."""
    size = 8 if double else 4
    for p in prange(parts):
        if by_columns:
            lo, hi = p * n // parts, (p + 1) * n // parts
            rows, cols = m, hi - lo
            a_off, b_off, c_off = 0, lo * ldb if tb == TRANS else lo, lo
        else:
            lo, hi = p * m // parts, (p + 1) * m // parts
            rows, cols = hi - lo, n
            a_off, b_off, c_off = lo if ta == TRANS else lo * lda, 0, lo * ldc
        if rows > 0 and cols > 0:
            pa, pb, pc = a + a_off * size, b + b_off * size, c + c_off * size
            if double:
                _dgemm(ROW_MAJOR, ta, tb, rows, cols, k, 1.0, pa, lda, pb, ldb, 0.0, pc, ldc)
            else:
                _sgemm(ROW_MAJOR, ta, tb, rows, cols, k, np.float32(1.0), pa, lda, pb, ldb, np.float32(0.0), pc, ldc)
