"""Matrix products for the layers: single-threaded BLAS calls spread over the kernels' threads.

OpenBLAS keeps its own thread pool, which spins after every call and then competes with the
numba kernels that follow for the same cores (badly so on a shared or busy host). So the first
product run here switches numpy's OpenBLAS to one thread (process-wide, via its
``*_set_num_threads`` symbol, as threadpoolctl does) and splits large products into blocks of
rows (or of columns, when there are few rows) over ``get_num_threads()`` threads: numba's own,
each calling ``cblas_?gemm`` from a parallel loop (``blas``), when numpy's OpenBLAS
exports it; otherwise a pool of Python threads (numpy releases the GIL; idle threads block).

**The blocks depend on the shapes only, never on the thread count.** OpenBLAS's result for an
element depends on the call it was computed in (its kernels differ with the block's size and
layout: a product and its two halves differ in the last bits), so a split chosen per thread count
would make a run's numbers depend on how many CPUs each instance got, and 1 x 4 replicas would no
longer match 2 x 2 on a 2-CPU host. So every product of at least ``_MIN_WORK`` multiply-adds goes
in blocks of about ``_BLOCK_WORK`` (at most ``_MAX_PARTS``), whatever the threads, and one thread
runs the same blocks one after another (tested: 1 and 2 threads agree bitwise).
"""

from __future__ import annotations

import ctypes
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from models.kernels import blas_buffers
from models.kernels import blas as B
from models.kernels import threads as _threads

logger = logging.getLogger(__name__)
_MIN_ROWS = 8192  # reductions over fewer rows than this are not split into partial sums
_MIN_WORK = 1 << 20  # multiply-adds below which one BLAS call on the caller's thread is cheaper
_MIN_PART = 16  # rows per part at least
_BLOCK_WORK = 1 << 22  # multiply-adds per block of a split product (about 0.1 ms of sgemm)
_MAX_PARTS = 64  # blocks of one product at most
_PARTS_STEP = 4  # more than 2 blocks come in multiples of this
_MAX_PARTIALS = 4  # partial sums of a long reduction without numba's BLAS (the Python pool's path)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_blas: list[str] = []  # "<library> (<kernel>)" for each OpenBLAS switched to one thread
_numba_blas = False  # products run on numba's threads (B.gemm)


def _single_threaded_blas() -> None:
    global _numba_blas
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
                _numba_blas = _numba_blas or B.bind(lib)
                logger.debug("set %s to 1 thread via %s", path, fn.__name__)
                break
            else:
                continue
            break


def _workers() -> ThreadPoolExecutor | None:
    global _pool, _pool_size
    n = _threads.get_num_threads()
    if _pool_size != n:
        if _pool_size == 0:
            _single_threaded_blas()
        if _pool is not None:
            _pool.shutdown()
        _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="models-gemm") if n > 1 and not _numba_blas \
            else None
        _pool_size = n
        _warm(n)  # every thread's first product: OpenBLAS reserves that thread's work buffer
        if _blas:  # numpy's BLAS is OpenBLAS
            blas_buffers.prefault()
    return _pool


def _warm(threads: int) -> None:
    """One small product on the calling thread and on each of numba's threads (``threads`` blocks),
    so that each takes its OpenBLAS work buffer before ``blas_buffers.prefault`` maps the first
    pages of the buffers. (Session 5 saw a thread's "first products" of some shapes run 3x slower,
    call after call, until a product with a short reduction had run: that product had written the
    buffer pages the slow shapes' prefetches fell into; see ``blas_buffers``.)"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64 * max(threads, 1), 272)).astype(np.float32)
    b = rng.standard_normal((272, 64)).astype(np.float32)
    out = np.empty((a.shape[0], 64), np.float32)
    np.matmul(a[:64], b, out=out[:64])
    if _numba_blas and threads > 1:
        _threads.use_threads(threads)
        B.gemm(False, B.NO_TRANS, B.NO_TRANS, a.shape[0], 64, 272, a.ctypes.data, 272, b.ctypes.data, 64,
               out.ctypes.data, 64, threads, False)
    elif threads > 1:
        list(_pool.map(lambda s: np.matmul(a[s], b, out=out[s]), _blocks(a.shape[0], threads)))


def pool_size() -> int:
    """Threads the products are split over (1: the caller's thread only)."""
    _workers()
    return max(_pool_size, 1)


def describe() -> str:
    """The BLAS libraries switched to one thread (with OpenBLAS's kernel name) and who calls them."""
    _workers()
    libs = ", ".join(_blas) or "numpy's BLAS (no OpenBLAS found)"
    return f"{libs} called from {'numba threads' if _numba_blas else 'a Python thread pool'}"


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a 2-D operand, None when BLAS cannot read it."""
    item = x.itemsize
    rows, cols = x.shape
    if x.strides[1] == item and (rows == 1 or x.strides[0] % item == 0 and x.strides[0] >= cols * item):
        return B.NO_TRANS, max(x.strides[0] // item if rows > 1 else cols, 1)
    if x.strides[0] == item and (cols == 1 or x.strides[1] % item == 0 and x.strides[1] >= rows * item):
        return B.TRANS, max(x.strides[1] // item if cols > 1 else rows, 1)
    return None


def _numba_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int) -> bool:
    """out = a @ b on numba's threads; False (nothing done) when the operands do not suit BLAS."""
    if not (_numba_blas and a.dtype == b.dtype == out.dtype and a.dtype in (np.float32, np.float64)):
        return False
    la, lb, lc = _layout(a), _layout(b), _layout(out)
    if la is None or lb is None or lc is None or lc[0] != B.NO_TRANS:
        return False
    m, k = a.shape
    n = b.shape[1]
    parts, by_columns = split(m, n, k)
    _threads.use_threads(max(1, min(parts, threads)))
    B.gemm(a.dtype == np.float64, la[0], lb[0], m, n, k, a.ctypes.data, la[1], b.ctypes.data, lb[1],
           out.ctypes.data, lc[1], parts, by_columns)
    return True


def split(m: int, n: int, k: int) -> tuple[int, bool]:
    """(blocks, by columns) of an [m, k] @ [k, n] product: blocks of about ``_BLOCK_WORK``
    multiply-adds (at least ``_MIN_PART`` rows or columns; more than 2 blocks rounded up to a
    multiple of 4), of rows of c, or of columns when the rows make one block or when columns make
    BLAS pack less: each call packs its whole other operand again, so row blocks repack b (k x n)
    once per block and column blocks repack a (m x k). A classifier's [128, 320] @ [320, 1000]
    took 1.3x one call's time in 8 row blocks of 16. A function of the shape alone (see the module
    docstring)."""
    rows = _balanced(m // max(_MIN_PART, _BLOCK_WORK // max(n * k, 1)))
    if m * n * k < _MIN_WORK:
        return rows, False
    cols = _balanced(n // max(_MIN_PART, _BLOCK_WORK // max(m * k, 1)))
    if cols > 1 and (rows == 1 or cols * m * k + k * n < rows * k * n + m * k):
        return cols, True
    return rows, False


def _balanced(parts: int) -> int:
    """1, 2, or a multiple of ``_PARTS_STEP`` up to ``_MAX_PARTS``: blocks that 1, 2 and 4 threads
    share evenly (3 blocks on 2 threads would leave one idle a third of the time)."""
    if parts <= 2:
        return max(parts, 1)
    return min(_MAX_PARTS, -(-parts // _PARTS_STEP) * _PARTS_STEP)


def _blocks(m: int, parts: int) -> list[slice]:
    return [slice(i * m // parts, (i + 1) * m // parts) for i in range(parts)]


def _pool_blocks(pool, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = a @ b through numpy, in :func:`split`'s blocks, on the Python pool (or in turn)."""
    parts, by_columns = split(a.shape[0], b.shape[1], a.shape[1])
    if parts == 1:
        return np.matmul(a, b, out=out)
    if by_columns:
        def one(s): np.matmul(a, b[:, s], out=out[:, s])
    else:
        def one(s): np.matmul(a[s], b, out=out[s])
    blocks = _blocks(b.shape[1] if by_columns else a.shape[0], parts)
    list(pool.map(one, blocks)) if pool is not None else [one(s) for s in blocks]
    return out


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = a @ b for 2-D a [M, K] (in blocks of rows or columns over the threads)."""
    pool = _workers()
    if a.shape[0] * a.shape[1] * b.shape[1] >= _MIN_WORK and _numba_gemm(a, b, out, _pool_size):
        return out
    return _pool_blocks(pool, a, b, out)


def matmul_tn(a: np.ndarray, b: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """out = a.T @ b for a [M, P], b [M, Q]: a long reduction (M >= _MIN_ROWS) is split into
    partial products over row blocks, then summed; a short one by rows of ``out``. ``scratch``
    is a [threads, P, Q] buffer."""
    pool = _workers()
    m, p, q = a.shape[0], a.shape[1], b.shape[1]
    if m * p * q >= _MIN_WORK and _numba_gemm(a.T, b, out, _pool_size):
        return out
    if m * p * q < _MIN_WORK:
        return np.matmul(a.T, b, out=out)
    if m >= _MIN_ROWS:  # partial products over row blocks (their count from the shape), then summed
        parts = _blocks(m, min(_MAX_PARTIALS, m // _MIN_ROWS, scratch.shape[0]))

        def one(i): np.matmul(a[parts[i]].T, b[parts[i]], out=scratch[i])
        list(pool.map(one, range(len(parts)))) if pool is not None else [one(i) for i in range(len(parts))]
        np.sum(scratch[:len(parts)], axis=0, out=out)
        return out
    return _pool_blocks(pool, a.T, b, out)


def matmul_batched(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out[g] = a[g] @ b[g] for stacks [G, M, K] @ [G, K, N] (groups split across the pool)."""
    pool = _workers()
    if pool is None or a.shape[0] < 2 or a.size * b.shape[2] < _MIN_WORK:
        return np.matmul(a, b, out=out)
    list(pool.map(lambda s: np.matmul(a[s], b[s], out=out[s]), _blocks(a.shape[0], min(_pool_size, a.shape[0]))))
    return out


def scratch_shape(p: int, q: int) -> tuple[int, int, int]:
    """The ``scratch`` of :func:`matmul_tn` for a [p, q] result (not sized by the thread count)."""
    return _MAX_PARTIALS, p, q
