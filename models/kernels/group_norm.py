"""numba kernels for group norm with an optional fused activation, per image on ``[N, HW, C]``.

Statistics: one pass per image with float64 accumulators of ``x - shift`` (``shift`` the
image's first pixel, per channel), combined exactly per group, so nothing cancels; as in
``norm.column_moments``. Forward writes per image and channel ``mu + mu_lo`` (the float64
mean split into two working-precision numbers) and ``a = invstd * gamma``, which
``group_affine_act`` applies, on each image seen as rows of at least 64 values (``wide_rows``).
Backward works per image: elementwise products in the working precision, their sums over pixels
(the dgamma/dbeta partials and the group means that dx needs) in float64.
"""

from __future__ import annotations

import math

import numpy as np

from jit import prange
from models.kernels.norm import BLOCK_ELEMS, RELU, SILU, affine_act_rows, wide_rows
from models.kernels.threads import CONTRACT, compiled_kernel



@compiled_kernel(parallel=True)
def group_stats(x, gamma, eps, mu, mu_lo, a, invstd):
    """For x [N, HW, C] and each image n and group g: invstd[n, g] = 1/sqrt(var + eps) (float64,
    biased variance over HW and the group's channels); per channel mu[n, c] + mu_lo[n, c] = the
    group mean and a[n, c] = invstd * gamma[c]."""
    n_, m_, c_ = x.shape
    groups = invstd.shape[1]
    cg = c_ // groups
    count = m_ * cg
    for n in prange(n_):
        shift = np.empty(c_)
        s1 = np.zeros(c_)
        s2 = np.zeros(c_)
        for c in range(c_):
            shift[c] = x[n, 0, c]
        for r in range(m_):
            row = x[n, r]
            for c in range(c_):
                d = row[c] - shift[c]
                s1[c] += d
                s2[c] += d * d
        for g in range(groups):  # (views and indices from 0: a signed c would need a wraparound test per
            lo = g * cg            # element, which LLVM vectorises into gathers and scatters on AVX-512)
            sh, t1, t2 = shift[lo:lo + cg], s1[lo:lo + cg], s2[lo:lo + cg]
            total = 0.0
            for j in range(cg):
                total += sh[j] * m_ + t1[j]
            mean = total / count
            ss = 0.0
            for j in range(cg):  # sum (x - mean)^2 = sum (d + e)^2, e = shift - mean
                e = sh[j] - mean
                ss += t2[j] + 2.0 * e * t1[j] + m_ * e * e
            inv = 1.0 / math.sqrt(max(ss / count, 0.0) + eps)
            invstd[n, g] = inv
            mg, lg, ag, gg = mu[n, lo:lo + cg], mu_lo[n, lo:lo + cg], a[n, lo:lo + cg], gamma[lo:lo + cg]
            for j in range(cg):
                mg[j] = mean
                lg[j] = mean - mg[j]
                ag[j] = inv * gg[j]


@compiled_kernel()
def _tile(values, k, out):
    """out = values repeated k times (the per-channel parameters of a widened row)."""
    c_ = values.shape[0]
    for j in range(k):
        for c in range(c_):
            out[j * c_ + c] = values[c]


@compiled_kernel(parallel=True)
def group_affine_act(x, mu, mu_lo, a, beta, y, sig, act, keep):
    """y[n] = act(((x[n] - mu[n]) - mu_lo[n])*a[n] + beta) for x, y [N, HW, C], mu, mu_lo, a [N, C],
    beta [C]; with SiLU and ``keep`` also sig = sigmoid(z): batch norm's epilogue (``norm.affine_act_rows``,
    one call per block of rows), each image read as rows of ``wide_rows`` pixels, in blocks of about
    ``BLOCK_ELEMS`` values."""
    n_, m_, c_ = x.shape
    k = wide_rows(m_, c_)
    rows, w = m_ // k, k * c_
    blocks = max(1, min(rows, rows * w // BLOCK_ELEMS))
    bt = np.empty(w, beta.dtype)
    _tile(beta, k, bt)
    for i in prange(n_ * blocks):
        n = i // blocks
        b = i - n * blocks
        xs, ys = x[n].reshape(rows, w), y[n].reshape(rows, w)
        ss = sig[n].reshape(rows, w) if keep else ys
        mt, lt, at = np.empty(w, mu.dtype), np.empty(w, mu.dtype), np.empty(w, a.dtype)
        _tile(mu[n], k, mt)
        _tile(mu_lo[n], k, lt)
        _tile(a[n], k, at)
        affine_act_rows(xs, ys, ss, mt, lt, at, bt, b * rows // blocks, (b + 1) * rows // blocks, act, keep)


@compiled_kernel(parallel=True, fastmath=CONTRACT)
def group_norm_backward(x, dy, sig, mu, mu_lo, a, beta, invstd, gamma, dx, dgamma_n, dbeta_n, act):
    """Backward of group norm + act per image: dx [N, HW, C], and per-image dgamma/dbeta
    partials [N, C] (float64). With d = x - mean, xhat = d * invstd and dz = dy * act'(z):
    dx = invstd * (gamma*dz - mean_g(gamma*dz) - xhat * mean_g(gamma*dz*xhat))."""
    n_, m_, c_ = x.shape
    groups = invstd.shape[1]
    cg = c_ // groups
    count = m_ * cg
    one = x.dtype.type(1)
    for n in prange(n_):
        p0, p1 = dbeta_n[n], dgamma_n[n]
        p0[:] = 0
        p1[:] = 0
        mun, lon, an = mu[n], mu_lo[n], a[n]
        for r in range(m_):  # dz into dx; p0 = sum dz, p1 = sum dz * d
            xr, gr, sr, out = x[n, r], dy[n, r], sig[n, r], dx[n, r]
            for c in range(c_):
                d = (xr[c] - mun[c]) - lon[c]
                if act == SILU:
                    s = sr[c]
                    g = gr[c] * (s * (one + (d * an[c] + beta[c]) * (one - s)))
                elif act == RELU:
                    g = gr[c] if d * an[c] + beta[c] > 0 else 0 * gr[c]
                else:
                    g = gr[c]
                out[c] = g
                p0[c] += g
                p1[c] += g * d
        gi, k0, k1 = np.empty(c_, x.dtype), np.empty(c_, x.dtype), np.empty(c_, x.dtype)
        for g in range(groups):  # by group, not c // cg per channel (an integer division each); views
            lo = g * cg            # indexed from 0 (see group_stats)
            inv = invstd[n, g]
            q0, q1, gm = p0[lo:lo + cg], p1[lo:lo + cg], gamma[lo:lo + cg]
            kg0 = 0.0
            kg1 = 0.0
            for j in range(cg):
                q1[j] *= inv  # now sum dz * xhat
                kg0 += gm[j] * q0[j] / count
                kg1 += gm[j] * q1[j] / count
            gig, k0g, k1g = gi[lo:lo + cg], k0[lo:lo + cg], k1[lo:lo + cg]
            for j in range(cg):
                gig[j] = gm[j] * inv
                k0g[j] = kg0 * inv
                k1g[j] = kg1 * inv * inv
        for r in range(m_):
            xr, out = x[n, r], dx[n, r]
            for c in range(c_):
                out[c] = gi[c] * out[c] - k0[c] - ((xr[c] - mun[c]) - lon[c]) * k1[c]
