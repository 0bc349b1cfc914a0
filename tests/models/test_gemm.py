"""models.kernels.gemm: products split in blocks (rows, columns, transposed operands) equal numpy's, and
the blocks, so the numbers, do not depend on the thread count."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from models.kernels import gemm as _gemm
from models.kernels import threads as _threads


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads; counts the products that ran on numba's threads (when numpy's OpenBLAS
    exports the ILP64 cblas symbols, as its wheels do) in ``calls``."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs NUMBA_NUM_THREADS >= 2 to split products")
    old = _threads.get_num_threads()
    _threads.set_num_threads(2)
    _gemm.pool_size()  # set up for 2 threads (and warm them: _gemm._warm) before counting
    calls = []
    gemm = _gemm.B.gemm
    monkeypatch.setattr(_gemm.B, "gemm", lambda *args: calls.append(args[-2:]) or gemm(*args))
    yield calls
    _threads.set_num_threads(old)


# (M, K, N): split by rows; few rows (split by columns); one block; odd sizes
SHAPES = [(4099, 64, 48), (24, 2000, 3000), (24, 700, 300), (37, 1500, 33)]


def test_every_thread_is_warmed_once_per_thread_count(monkeypatch):
    old = _threads.get_num_threads()
    _threads.set_num_threads(1)
    _gemm.pool_size()  # set up (finds numpy's OpenBLAS) on one thread
    if not _gemm._numba_blas or numba.config.NUMBA_NUM_THREADS < 2:
        _threads.set_num_threads(old)
        pytest.skip("needs numba's BLAS and NUMBA_NUM_THREADS >= 2")
    calls = []
    gemm = _gemm.B.gemm
    monkeypatch.setattr(_gemm.B, "gemm", lambda *args: calls.append(args[-2:]) or gemm(*args))
    try:
        _threads.set_num_threads(2)
        _gemm.pool_size()
        _gemm.pool_size()
        assert calls == [(2, False)]  # one block per thread, once
    finally:
        _threads.set_num_threads(old)


def test_the_split_is_a_function_of_the_shape():
    assert _gemm.split(4099, 48, 64) == (4, False)  # 3 blocks of 1365 rows (4 Mi multiply-adds), made 4
    assert _gemm.split(24, 3000, 2000) == (36, True)  # too few rows: 34 blocks of 87 columns, made 36
    assert _gemm.split(37, 33, 1500) == (1, False)
    assert _gemm.split(100352, 96, 96) == (64, False)  # capped at 64 blocks
    assert _gemm.split(96, 96, 100352) == (8, False)  # a long reduction: 6 blocks of 16 rows, made 8
    assert _gemm.split(2048, 64, 64) == (2, False)  # 2 blocks stay 2
    assert _gemm.split(3136, 48, 8) == (1, False)  # 1.2 M multiply-adds: one call


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_split_equals_numpy(two_threads, dtype, m, k, n):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    for lhs, rhs in [(a, b), (a, np.ascontiguousarray(b.T).T), (np.ascontiguousarray(a.T).T, b)]:
        out = np.full((m, n), np.nan, dtype)
        _gemm.matmul(lhs, rhs, out)
        np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol * np.sqrt(k))
    wide = np.zeros((m, k + 5), dtype)  # a row slice: leading dimension larger than the width
    wide[:, :k] = a
    out = np.empty((m, n), dtype)
    _gemm.matmul(wide[:, :k], b, out)
    np.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol * np.sqrt(k))
    if _gemm._numba_blas:  # every product ran on numba's threads, in split()'s blocks
        assert two_threads == [_gemm.split(m, n, k)] * 4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_tn_equals_numpy(two_threads, dtype):
    rng = np.random.default_rng(1)
    for m, p, q in [(9000, 40, 24), (500, 96, 64)]:
        a = rng.standard_normal((m, p)).astype(dtype)
        b = rng.standard_normal((m, q)).astype(dtype)
        out = np.empty((p, q), dtype)
        _gemm.matmul_tn(a, b, out, np.empty(_gemm.scratch_shape(p, q), dtype))
        tol = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(out, a.T @ b, rtol=tol, atol=tol * np.sqrt(m))


def test_operand_layouts():
    x = np.zeros((6, 4), np.float32)
    assert _gemm._layout(x) == (111, 4)  # row-major, no transpose
    assert _gemm._layout(x.T) == (112, 4)  # a transposed view
    assert _gemm._layout(np.zeros((6, 9), np.float32)[:, :4]) == (111, 9)
    assert _gemm._layout(x[::2]) == (111, 8)
    assert _gemm._layout(np.zeros((6, 8), np.float32)[:, ::2]) is None  # not readable by BLAS: numpy does it


@pytest.mark.parametrize("m,k,n", [(4099, 64, 48), (24, 2000, 3000), (3136, 8, 48)])
def test_one_and_two_threads_give_bitwise_the_same_products(m, k, n):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs NUMBA_NUM_THREADS >= 2")
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32).T  # a weight's transposed view, as the layers pass it
    old, got = _threads.get_num_threads(), []
    try:
        for threads in (1, 2):
            _threads.set_num_threads(threads)
            out = np.empty((m, n), np.float32)
            tn = np.empty((k, n), np.float32)
            _gemm.matmul(a, b, out)
            _gemm.matmul_tn(a, out, tn,
                            np.empty(_gemm.scratch_shape(k, n), np.float32))
            got.append((out.tobytes(), tn.tobytes()))
    finally:
        _threads.set_num_threads(old)
    assert got[0] == got[1]


def test_few_rows_against_many_columns_split_by_columns():
    """Row blocks repack all of b, column blocks all of a: a classifier's product (batch 128, 1000
    classes) goes in blocks of columns; a 1x1 convolution's (many pixels, few channels) in rows."""
    assert _gemm.split(128, 1000, 320) == (12, True)  # 8 row blocks would pack b 8 times
    assert _gemm.split(128, 1000, 1280) == (40, True)
    assert _gemm.split(25088, 96, 96) == (56, False)
    assert _gemm.split(1000, 320, 128) == (12, False)  # the classifier's weight gradient: rows
