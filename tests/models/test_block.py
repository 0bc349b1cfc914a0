"""jit.block: the register-block operations, compiled and as plain Python (POPRUN_JIT=0)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from jit import block


@numba.njit
def _outer(xs, ws, ys, acc_like):
    acc = block.zeros(acc_like, 3, 8)
    for c in range(4):  # x[t] = xs[c + 5 t] (a column of a [3, 5] matrix), w = ws[8 c : 8 c + 8]
        acc = block.outer_fma(acc, xs, c, 5, ws, 8 * c)
    block.store(acc, ys, 2, 10, 2)  # rows 0 and 1 at ys[2 + 10 t : + 8]
    twice = block.load(acc, ys, 2, 10)  # rows 0, 1 as stored; row 2 reads what ys holds there
    block.add_to(twice, ys, 2, 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_outer_products_store_load_and_add_at_element_offsets(dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, (3, 5)).astype(dtype)
    w = rng.integers(-4, 5, (4, 8)).astype(dtype)
    ys = np.zeros(40, dtype)
    _outer(x.reshape(-1), w.reshape(-1), ys, ys)
    want = np.zeros(40, dtype)
    prod = x[:, :4] @ w  # small integers: exact in any order
    for t in range(2):
        want[2 + 10 * t: 10 + 10 * t] = 2 * prod[t]
    np.testing.assert_array_equal(ys, want)  # row 2 was never stored: load read zeros there, add_to added them


def test_each_step_is_one_fused_multiply_add():
    """float32: x * w + acc rounded once (an FMA), not twice."""
    x = np.array([1 + 2.0 ** -12] * 3 + [0, 0], np.float32)
    w = np.full(32, 1 + 2.0 ** -12, np.float32)
    ys = np.full(40, -(1 + 2.0 ** -11), np.float32)
    acc_like = np.zeros(1, np.float32)

    @numba.njit
    def one(xs, ws, ys, like):
        acc = block.load(block.zeros(like, 3, 8), ys, 0, 10)
        acc = block.outer_fma(acc, xs, 0, 1, ws, 0)
        block.store(acc, ys, 0, 10, 3)

    one(x, w, ys, acc_like)
    # exact: (1 + e)^2 - (1 + 2e) = e^2; rounded first, (1 + e)^2 is 1 + 2e in float32 and the sum 0
    assert ys[0] == np.float32(2.0 ** -24) and ys[10] == ys[20] == np.float32(2.0 ** -24)


def test_the_kernels_run_as_plain_python(tmp_path):
    """POPRUN_JIT=0: the blocks are numpy arrays and the hand kernels give the same products."""
    code = textwrap.dedent("""
        import numpy as np
        from models.kernels import pointwise as P
        rng = np.random.default_rng(1)
        a, w = rng.integers(-3, 4, (13, 16)).astype(np.float32), rng.integers(-3, 4, (16, 16)).astype(np.float32)
        y = np.empty((13, 16), np.float32)
        P.matmul(a, w, y, 2)
        part = np.empty((2, 16, 16), np.float32)
        P.weight_grad(a, y, part)
        assert (y == a @ w).all() and (part.sum(axis=0) == a.T @ y).all()
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, POPRUN_JIT="0"),
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
