"""Matrix products for the layers: single-threaded BLAS calls spread over a small pool.

OpenBLAS keeps its own thread pool, which spins after every call and then competes with the
numba kernels that follow for the same cores (badly so on a shared or busy host). So the first
product run here switches numpy's OpenBLAS to one thread (process-wide, via its
``*_set_num_threads`` symbol, as threadpoolctl does) and splits large products by rows over
``get_num_threads()`` Python threads (numpy releases the GIL; idle threads block, not spin).
"""

from __future__ import annotations

import ctypes
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from models import _jit

logger = logging.getLogger(__name__)
_MIN_ROWS = 8192  # below this, one BLAS call
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_blas: list[str] = []  # "<library> (<kernel>)" for each OpenBLAS switched to one thread


def _single_threaded_blas() -> None:
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        return
    for path in libs:
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                fn = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if fn is None:
                    continue
                fn(ctypes.c_int(1))
                core = getattr(lib, f"{prefix}_get_corename{suffix}", None)
                if core is not None:
                    core.restype = ctypes.c_char_p
                kernel = core().decode() if core is not None else "kernel unknown"
                _blas.append(f"{path.rsplit('/', 1)[-1]} ({kernel})")
                logger.debug("set %s to 1 thread via %s", path, fn.__name__)
                break
            else:
                continue
            break


def _workers() -> ThreadPoolExecutor | None:
    global _pool, _pool_size
    n = _jit.get_num_threads()
    if _pool_size != n:
        if _pool is None:
            _single_threaded_blas()
        else:
            _pool.shutdown()
        _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="models-gemm") if n > 1 else None
        _pool_size = n
    return _pool


def pool_size() -> int:
    """Threads the products are split over (1: the caller's thread only)."""
    _workers()
    return max(_pool_size, 1)


def describe() -> str:
    """The BLAS libraries switched to one thread, with OpenBLAS's kernel name."""
    _workers()
    return ", ".join(_blas) or "numpy's BLAS (no OpenBLAS found)"


def _blocks(m: int, parts: int) -> list[slice]:
    return [slice(i * m // parts, (i + 1) * m // parts) for i in range(parts)]


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = a @ b for 2-D a [M, K] (rows split across the pool)."""
    pool = _workers()
    if pool is None or a.shape[0] < _MIN_ROWS:
        return np.matmul(a, b, out=out)
    list(pool.map(lambda s: np.matmul(a[s], b, out=out[s]), _blocks(a.shape[0], _pool_size)))
    return out


def matmul_tn(a: np.ndarray, b: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """out = a.T @ b for a [M, P], b [M, Q] (partial products over row blocks, then summed);
    ``scratch`` is a [threads, P, Q] buffer the caller keeps."""
    pool = _workers()
    if pool is None or a.shape[0] < _MIN_ROWS:
        return np.matmul(a.T, b, out=out)
    parts = _blocks(a.shape[0], _pool_size)
    list(pool.map(lambda i: np.matmul(a[parts[i]].T, b[parts[i]], out=scratch[i]), range(len(parts))))
    np.sum(scratch[:len(parts)], axis=0, out=out)
    return out


def matmul_batched(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out[g] = a[g] @ b[g] for stacks [G, M, K] @ [G, K, N] (groups split across the pool)."""
    pool = _workers()
    if pool is None or a.shape[0] < 2 or a.shape[1] * a.shape[0] < _MIN_ROWS:
        return np.matmul(a, b, out=out)
    list(pool.map(lambda s: np.matmul(a[s], b[s], out=out[s]), _blocks(a.shape[0], min(_pool_size, a.shape[0]))))
    return out


def scratch_shape(p: int, q: int) -> tuple[int, int, int]:
    return max(_jit.get_num_threads(), 1), p, q
