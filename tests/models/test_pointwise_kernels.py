"""The direct 1x1-convolution kernel against float64 numpy, and the conv layer on its shapes."""

from __future__ import annotations

import numpy as np
import pytest

from models.kernels import threads as _threads
from models.kernels import pointwise as P
from models.conv import Conv2d


@pytest.fixture(params=[1, 2], ids=["1thr", "2thr"])
def threads(request):
    before = _threads.get_num_threads()
    _threads.set_num_threads(min(request.param, before))
    yield _threads.get_num_threads()
    _threads.set_num_threads(before)


# (M, K, N): tiles that divide M or leave a ragged tail, fewer rows than one tile, K over
# K_BLOCK (partial sums resumed from y), both register-block widths (N multiple of 16, or of 8 only)
SHAPES = [(12, 16, 16), (13, 5, 16), (5, 7, 16), (1, 3, 8), (25, 9, 24), (101, P.K_BLOCK + 37, 32),
          (2 * P.ROWS_BLOCK + 7, 40, 48), (300, 2 * P.K_BLOCK, 8)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_matches_float64(threads, dtype, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    y = np.full((m, n), np.nan, dtype)
    P.matmul(a, w, y, threads)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, a.astype(np.float64) @ w.astype(np.float64), rtol=tol, atol=tol * np.sqrt(k))


def test_matmul_is_bitwise_the_same_for_any_thread_count():
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((1001, 300)).astype(np.float32), rng.standard_normal((300, 48)).astype(np.float32)
    y1, y2 = np.empty((1001, 48), np.float32), np.empty((1001, 48), np.float32)
    P.matmul(a, w, y1, 1)
    P.matmul(a, w, y2, 3)
    np.testing.assert_array_equal(y1, y2)


# (M, K, N): runs shorter than a pixel block and crossing several, both register blocks
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(7, 6, 16), (2 * P.PIXELS_BLOCK + 5, 18, 32), (333, 24, 8), (1, 12, 8)])
def test_weight_grad_matches_float64(threads, dtype, m, k, n):
    rng = np.random.default_rng(m + k * n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((m, n)).astype(dtype)
    part = np.full((2 * threads, k, n), np.nan, dtype)
    P.weight_grad(a, b, part)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(part.sum(axis=0), a.astype(np.float64).T @ b, rtol=tol, atol=tol * np.sqrt(m))


def test_rule():
    assert P.suits(1 << 16, 16, 32, np.float32) and P.suits(72, 272, 1088, np.float32)  # long and narrow; few rows
    assert P.suits(2048, 96, 16, np.float32) and P.suits(72, 1088, 272, np.float32)
    assert not P.suits(1 << 16, 16, 96, np.float32)  # long, wider output: BLAS
    assert not P.suits(1 << 16, 16, 32, np.float64)  # float64: BLAS
    assert not P.suits(4096, 40, 240, np.float32)  # mid-sized: BLAS
    assert not P.suits(128, 48, 128, np.float32)  # few rows, but under 1 M multiply-adds: BLAS
    assert not P.suits(1 << 16, 8, 32, np.float32)  # a stem's few input channels: BLAS
    assert not P.suits(1 << 16, 16, 36, np.float32)  # N not a multiple of 8
    # the forward pass transposes the weight first: only worth it over 1024 rows or more
    assert not P.suits(72, 272, 1088, np.float32, transposes_weight=True)
    assert P.suits(1 << 16, 16, 32, np.float32, transposes_weight=True)
    assert P.suits_weight_grad(1 << 16, 96, 96, np.float32) and P.suits_weight_grad(1 << 14, 48, 8, np.float32)
    assert P.suits_weight_grad(3136, 480, 80, np.float32)  # B0-224's 14 x 14 stage: a result of 38400 entries
    assert not P.suits_weight_grad(1 << 16, 9, 96, np.float32)  # K whole tiles of no register block
    assert not P.suits_weight_grad(4096, 96, 96, np.float32)  # a short reduction into a small result
    assert not P.suits_weight_grad(1024, 480, 80, np.float32)  # too short


# (batch, H, W, cin, cout): few rows into a wide output (forward BLAS, input gradient direct),
# and many rows (all direct, the weight gradient as dy^T x, or as (x^T dy)^T), with a ragged last tile
@pytest.mark.parametrize("shape", [(2, 3, 7, 64, 448), (1, 257, 256, 16, 24), (1, 257, 256, 48, 8)])
def test_conv_on_the_direct_path_matches_float64(threads, shape):
    n, h, w, cin, cout = shape
    rng = np.random.default_rng(1)
    conv = Conv2d("c", "b", cin, cout, 1, dtype=np.float32, rng=rng)
    m = n * h * w  # the forward pass or the input gradient (or both) through the kernel
    assert conv.path == "pointwise"
    assert P.suits(m, cin, cout, np.float32, transposes_weight=True) or P.suits(m, cout, cin, np.float32)
    x = rng.standard_normal((n, h, w, cin)).astype(np.float32)
    g = rng.standard_normal((n, h, w, cout)).astype(np.float32)
    w64 = conv.weight.data.reshape(cout, cin).astype(np.float64)
    x64, g64 = x.reshape(-1, cin).astype(np.float64), g.reshape(-1, cout).astype(np.float64)
    y = conv.forward(x, True)
    np.testing.assert_allclose(y.reshape(-1, cout), x64 @ w64.T, rtol=1e-5, atol=1e-5)
    dx = conv.backward(g)
    np.testing.assert_allclose(dx.reshape(-1, cin), g64 @ w64, rtol=1e-5, atol=1e-5 * np.sqrt(cout))
    np.testing.assert_allclose(conv.weight.grad.reshape(cout, cin), g64.T @ x64, rtol=1e-4,
                               atol=1e-4 * np.sqrt(x64.shape[0]))


def test_the_register_block_fits_the_register_file():
    """Rows per block: at most 12 accumulator registers of AVX2's 16, 24 of AVX-512's 32 (16 lanes at
    512 bits, 8 when held to 256); the weight gradient takes the first that divides K."""
    assert P.tiles((16, 8)) == {16: (6, 4, 2), 8: (8, 4, 2)}
    assert P.tiles((32, 16)) == {16: (24, 16, 8, 6), 8: (24, 16, 8, 6)}
    assert P.tiles((32, 8))[16] == (12, 8, 6, 4, 2)
    assert all(P.ROWS_BLOCK % t[0] == 0 for regs in ((16, 8), (32, 16), (32, 8)) for t in P.tiles(regs).values())


def test_few_row_products_split_their_columns_too():
    """Parts of whole row tiles while each gets two, else columns as well; the forward's tile divides a short M."""
    assert P.split(100, 12, 2) == (2, 1) and P.split(3, 12, 2) == (1, 2) and P.split(3, 1, 2) == (2, 1)
    assert P.split(2, 40, 4) == (1, 4) and P.split(1, 1, 8) == (1, 1)
    assert P.forward_tile(72, 16) in (24, 6) and P.forward_tile(64, 16) in (16, 4, 2)  # AVX-512 or AVX2
    assert P.forward_tile(1 << 16, 16) == P.tiles()[16][0]


@pytest.mark.parametrize("m,n", [(64, 192), (72, 1088), (13, 48)])
def test_the_column_split_computes_the_same_bits(m, n):
    rng = np.random.default_rng(m + n)
    a, w = rng.standard_normal((m, 300)).astype(np.float32), rng.standard_normal((300, n)).astype(np.float32)
    ys = []
    for chunks in (1, 2, 4):
        y = np.empty((m, n), np.float32)
        P.matmul(a, w, y, chunks)
        ys.append(y)
    np.testing.assert_array_equal(ys[0], ys[1])
    np.testing.assert_array_equal(ys[0], ys[2])
    np.testing.assert_allclose(ys[0], a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
