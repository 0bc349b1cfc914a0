"""numba kernels for normalisation with an optional fused activation, on ``[M, C]`` views.

Batch norm sees the whole batch as ``[N*H*W, C]`` (possibly widened to ``[M/k, k*C]`` so the
inner loops are long enough to vectorise; per-column arrays are then tiled k times); group
norm works per image on ``[N, H*W, C]``. Statistics accumulate in float64 and the variance is
two-pass (mean first), so float32 results are as close to exact as the format allows.

The normalised value is ``z = ((x - mu) - mu_lo)*a + beta``, where ``mu + mu_lo`` is the float64
mean split into two working-precision numbers: subtracting the mean first, in two parts, keeps
full precision when the mean is large against the spread. Activations (``act``: 0 none,
1 SiLU, 2 ReLU): the forward SiLU of float32 tensors is evaluated in float32 (``sigmoid_w``,
within a few ulp; eight SIMD lanes instead of four), and so is the backward's SiLU derivative from
the stored sigmoid (as group norm's); the float64 path (and the standalone activations' float64
``sigmoid``) uses a vectorisable exp. Sums stay float64 throughout.
"""

from __future__ import annotations

import numpy as np

from numba.core import types

from jit import ENABLED, prange
from models.kernels.threads import compiled_kernel
from models.kernels.vmath import exp, exp_neg32

NONE, SILU, RELU = 0, 1, 2
BLOCK_ELEMS = 1 << 14  # values per work item of the epilogue (affine_act, group_norm.group_affine_act)
MIN_BLOCKS = 64  # work items of affine_act at least (group norm's are at least its images)


@compiled_kernel()
def sigmoid(z):
    """Branch-free logistic function in float64 (never overflows)."""
    zz = float(z)
    e = exp(-abs(zz))
    s = 1.0 / (1.0 + e)
    return s if zz >= 0 else e * s


@compiled_kernel()
def _sigmoid32(z):
    """Logistic function of a float32 in float32 arithmetic."""
    e = exp_neg32(-abs(z))
    s = np.float32(1.0) / (np.float32(1.0) + e)
    return s if z >= 0 else e * s


def sigmoid_w(z):
    """sigmoid(z) in z's working precision: float32 arithmetic for a float32 (a few ulp; tested),
    :func:`sigmoid` in float64 otherwise (and always when the kernels run as plain Python, then
    rounded to z's type, as a stored value would be)."""
    return type(z)(sigmoid(z)) if isinstance(z, np.floating) else sigmoid(z)


if ENABLED:
    from numba.extending import overload

    @overload(sigmoid_w)
    def _sigmoid_w(z):
        if z == types.float32:
            return lambda z: _sigmoid32(z)
        return lambda z: sigmoid(z)


@compiled_kernel()
def wide_rows(m, c):
    """Rows of [m, c] to read as one, [m / k, k * c]: the largest k <= 64 / c that divides m, so
    that a row holds at least 64 values where it can (the inner loops then vectorise; a row of 8
    channels would run in scalar remainder code). Batch norm widens the whole batch so, group norm
    each image."""
    k = max(1, 64 // c)
    while m % k:
        k -= 1
    return k


@compiled_kernel()
def silu(z):
    zz = float(z)
    return zz * sigmoid(zz)


@compiled_kernel()
def silu_grad(z):
    zz = float(z)
    s = sigmoid(zz)
    return s * (1.0 + zz * (1.0 - s))


@compiled_kernel()
def act_value(z, act):
    if act == SILU:
        return silu(z)
    if act == RELU:
        return max(float(z), 0.0)
    return float(z)


@compiled_kernel()
def act_grad(z, act):
    """d act(z) / dz."""
    if act == SILU:
        return silu_grad(z)
    if act == RELU:
        return 1.0 if z > 0 else 0.0
    return 1.0


@compiled_kernel()
def _sum_parts(part, a, b):
    """a[c], b[c] = the sums over chunks t = 0, 1, ... in order of part[t, 0, c] and part[t, 1, c]
    (plain loops: a strided slice and its .sum() per column cost microseconds each, which is
    most of a small tensor's statistics)."""
    for c in range(part.shape[2]):
        sa = 0.0
        sb = 0.0
        for t in range(part.shape[0]):
            sa += part[t, 0, c]
            sb += part[t, 1, c]
        a[c] = sa
        b[c] = sb


@compiled_kernel(parallel=True)
def column_moments(x, shift, s1, s2, chunks):
    """s1[c] = sum(x - shift[c]), s2[c] = sum((x - shift[c])**2) over rows of x [M, C], in one
    pass with float64 accumulators. With ``shift`` a sample of the column (its first row), the
    variance ``s2/M - (s1/M)**2`` loses no significant precision to cancellation."""
    m_, c_ = x.shape
    part = np.zeros((chunks, 2, c_))
    for t in prange(chunks):
        p1 = part[t, 0]
        p2 = part[t, 1]
        for r in range(t * m_ // chunks, (t + 1) * m_ // chunks):
            row = x[r]
            for c in range(c_):
                d = float(row[c]) - shift[c]
                p1[c] += d
                p2[c] += d * d
    _sum_parts(part, s1, s2)


@compiled_kernel()
def silu_parts(x, mu, mu_lo, a, beta):
    """(z, sigmoid(z)) for z = ((x - mu) - mu_lo)*a + beta in x's working precision: the
    forward's exact arithmetic, so backward recomputes the very sigmoid the forward used (no
    FMA contraction here; kernels that contract call this to keep it so)."""
    z = ((x - mu) - mu_lo) * a + beta
    return z, sigmoid_w(z)


@compiled_kernel()
def sigmoid_row(row, mu, mu_lo, a, beta, sig):
    """sig = sigmoid(z) for one row, as the forward computed it (a loop of its own, so that it
    vectorises like the forward's, and so that a caller's own z may contract to an FMA)."""
    for c in range(row.shape[0]):
        sig[c] = silu_parts(row[c], mu[c], mu_lo[c], a[c], beta[c])[1]


@compiled_kernel()
def affine_act_rows(xs, ys, ss, mu, mu_lo, a, beta, r0, r1, act, keep):
    """The norm + activation epilogue of batch and group norm: ys[r] = act(((xs[r] - mu) - mu_lo)*a + beta) for
    rows r0 <= r < r1 of [R, W] views, per column; the tests are outside the loops. For SiLU with ``keep`` the
    sigmoid of z is also stored in ``ss[r]`` for the backward pass (without, backward recomputes it). A caller
    gives it a block of rows at a time (one call per row of a short row costs more than the row)."""
    w = xs.shape[1]
    if act == SILU and keep:
        for r in range(r0, r1):
            xr, yr, sr = xs[r], ys[r], ss[r]
            for j in range(w):
                z, sz = silu_parts(xr[j], mu[j], mu_lo[j], a[j], beta[j])
                sr[j] = sz
                yr[j] = z * sz
    elif act == SILU:
        for r in range(r0, r1):
            xr, yr = xs[r], ys[r]
            for j in range(w):
                z, sz = silu_parts(xr[j], mu[j], mu_lo[j], a[j], beta[j])
                yr[j] = z * sz
    elif act == RELU:
        for r in range(r0, r1):
            xr, yr = xs[r], ys[r]
            for j in range(w):
                yr[j] = max(((xr[j] - mu[j]) - mu_lo[j]) * a[j] + beta[j], 0)
    else:
        for r in range(r0, r1):
            xr, yr = xs[r], ys[r]
            for j in range(w):
                yr[j] = ((xr[j] - mu[j]) - mu_lo[j]) * a[j] + beta[j]


@compiled_kernel()
def _dz_row(xr, gr, sr, mu, mu_lo, a, beta, invstd, out, p0, p1, act):
    """out = gr * act'(z) for one row (SiLU: from the sigmoid ``sr``), in the working precision as
    group norm's backward does (float64 arithmetic rounded once cost a fifth more time per
    element), and p0 += out, p1 += out * xhat (float64)."""
    c_ = xr.shape[0]
    one = xr.dtype.type(1)
    if act == SILU:
        for c in range(c_):
            z = ((xr[c] - mu[c]) - mu_lo[c]) * a[c] + beta[c]
            sz = sr[c]
            out[c] = gr[c] * (sz * (one + z * (one - sz)))
    elif act == RELU:
        for c in range(c_):
            out[c] = gr[c] if ((xr[c] - mu[c]) - mu_lo[c]) * a[c] + beta[c] > 0 else 0
    else:
        for c in range(c_):
            out[c] = gr[c]
    for c in range(c_):  # the two sums in loops of their own: one loop writing both
        p0[c] += float(out[c])  # views of one array does not vectorise (too many alias checks)
    for c in range(c_):
        p1[c] += float(out[c]) * (float(xr[c] - mu[c]) - mu_lo[c]) * invstd[c]


@compiled_kernel(parallel=True)
def affine_act(x, mu, mu_lo, a, beta, y, sig, act, keep):
    """y = act(((x - mu) - mu_lo)*a + beta) per column, for x, y [M, C]; sig = sigmoid(z) (SiLU, keep); in
    blocks of about ``BLOCK_ELEMS`` values, at least ``MIN_BLOCKS`` of them (work for every thread)."""
    m_ = x.shape[0]
    blocks = min(m_, max(MIN_BLOCKS, m_ * x.shape[1] // BLOCK_ELEMS))
    for b in prange(blocks):
        affine_act_rows(x, y, sig, mu, mu_lo, a, beta, b * m_ // blocks, (b + 1) * m_ // blocks, act, keep)


@compiled_kernel(parallel=True)
def norm_backward_reduce(x, dy, sig, mu, mu_lo, a, beta, invstd, dz, s0, s1, act, keep, chunks):
    """dz = dy * act'(z) (written to ``dz``), s0 = sum(dz), s1 = sum(dz * xhat) per column; SiLU's
    sigmoid from ``sig`` with ``keep``, else recomputed."""
    m_, c_ = x.shape
    part = np.zeros((chunks, 2, c_))
    for t in prange(chunks):
        srow = np.empty(c_ if act == SILU and not keep else 0, x.dtype)
        for r in range(t * m_ // chunks, (t + 1) * m_ // chunks):
            sr = sig[r]
            if act == SILU and not keep:
                sigmoid_row(x[r], mu, mu_lo, a, beta, srow)
                sr = srow
            _dz_row(x[r], dy[r], sr, mu, mu_lo, a, beta, invstd, dz[r], part[t, 0], part[t, 1], act)
    _sum_parts(part, s0, s1)


@compiled_kernel(parallel=True)
def norm_backward_apply(x, mu, mu_lo, a, k0, k1, dx):
    """dx = a * (dz - k0 - (x - mu) * k1), in place over dx (which holds dz)."""
    m_, c_ = x.shape
    for r in prange(m_):
        xr = x[r]
        out = dx[r]
        for c in range(c_):
            out[c] = a[c] * (out[c] - k0[c] - ((xr[c] - mu[c]) - mu_lo[c]) * k1[c])


@compiled_kernel(parallel=True)
def scale_columns(dx, a):
    """dx *= a per column (eval-mode batch-norm backward)."""
    m_, c_ = dx.shape
    for r in prange(m_):
        out = dx[r]
        for c in range(c_):
            out[c] = out[c] * a[c]
