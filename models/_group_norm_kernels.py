"""numba kernels for group norm with an optional fused activation, per image on ``[N, HW, C]``.

Statistics: one pass per image with float64 accumulators of ``x - shift`` (``shift`` the
image's first pixel, per channel), combined exactly per group, so nothing cancels; as in
``_norm_kernels.column_moments``. Forward writes per image and channel ``mu + mu_lo`` (the float64
mean split into two working-precision numbers) and ``a = invstd * gamma``, which
``_norm_kernels.group_affine_act`` applies. Backward works per image: elementwise products in
the working precision, their sums over pixels (the dgamma/dbeta partials and the group means
that dx needs) in float64.
"""

from __future__ import annotations

import math

import numpy as np

from models._jit import CONTRACT, jit, prange
from models._norm_kernels import RELU, SILU


@jit(parallel=True)
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
        for g in range(groups):
            total = 0.0
            for c in range(g * cg, (g + 1) * cg):
                total += shift[c] * m_ + s1[c]
            mean = total / count
            ss = 0.0
            for c in range(g * cg, (g + 1) * cg):  # sum (x - mean)^2 = sum (d + e)^2, e = shift - mean
                e = shift[c] - mean
                ss += s2[c] + 2.0 * e * s1[c] + m_ * e * e
            inv = 1.0 / math.sqrt(max(ss / count, 0.0) + eps)
            invstd[n, g] = inv
            for c in range(g * cg, (g + 1) * cg):
                mu[n, c] = mean
                mu_lo[n, c] = mean - mu[n, c]
                a[n, c] = inv * gamma[c]


@jit(parallel=True, fastmath=CONTRACT)
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
        kg0 = np.zeros(groups)
        kg1 = np.zeros(groups)
        for c in range(c_):
            p1[c] *= invstd[n, c // cg]  # now sum dz * xhat
            kg0[c // cg] += gamma[c] * p0[c] / count
            kg1[c // cg] += gamma[c] * p1[c] / count
        gi, k0, k1 = np.empty(c_, x.dtype), np.empty(c_, x.dtype), np.empty(c_, x.dtype)
        for c in range(c_):
            inv = invstd[n, c // cg]
            gi[c] = gamma[c] * inv
            k0[c] = kg0[c // cg] * inv
            k1[c] = kg1[c // cg] * inv * inv
        for r in range(m_):
            xr, out = x[n, r], dx[n, r]
            for c in range(c_):
                out[c] = gi[c] * out[c] - k0[c] - ((xr[c] - mun[c]) - lon[c]) * k1[c]
