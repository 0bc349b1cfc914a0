"""numba kernels for normalisation with an optional fused activation, on ``[M, C]`` views.

Batch norm sees the whole batch as ``[N*H*W, C]``; group norm works per image on
``[N, H*W, C]``. Statistics are accumulated in float64 and the variance is two-pass
(mean first), so float32 results are as close to exact as the format allows.
``act``: 0 none, 1 SiLU, 2 ReLU, applied to the normalised value with per-channel (batch norm) or
per-image-and-channel (group norm) ``mu`` and ``a``: ``z = ((x - mu) - mu_lo)*a + beta``, where
``mu + mu_lo`` is the float64 mean split into two working-precision numbers. Subtracting the
mean before scaling, in two parts, keeps full precision when the mean is large against the
spread, while the arithmetic stays in the working precision (float32 vectorises twice as wide).
"""

from __future__ import annotations

import math

import numpy as np

from models._jit import jit, prange

NONE, SILU, RELU = 0, 1, 2


@jit()
def sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@jit()
def act_value(z, act):
    if act == 1:
        return z * sigmoid(z)
    if act == 2:
        return z if z > 0 else 0.0 * z
    return z


@jit()
def act_grad(z, act):
    """d act(z) / dz."""
    if act == 1:
        s = sigmoid(z)
        return s * (1.0 + z * (1.0 - s))
    if act == 2:
        return 1.0 if z > 0 else 0.0
    return 1.0


@jit(parallel=True)
def column_moments(x, mean, var, chunks):
    """Per-column mean and biased variance of x [M, C], two-pass, float64 accumulators."""
    m_, c_ = x.shape
    part = np.zeros((chunks, c_))
    for t in prange(chunks):
        acc = part[t]
        for r in range(t * m_ // chunks, (t + 1) * m_ // chunks):
            row = x[r]
            for c in range(c_):
                acc[c] += row[c]
    for c in range(c_):
        mean[c] = part[:, c].sum() / m_
    part[:] = 0
    for t in prange(chunks):
        acc = part[t]
        for r in range(t * m_ // chunks, (t + 1) * m_ // chunks):
            row = x[r]
            for c in range(c_):
                d = row[c] - mean[c]
                acc[c] += d * d
    for c in range(c_):
        var[c] = part[:, c].sum() / m_


@jit(parallel=True)
def affine_act(x, mu, mu_lo, a, beta, y, act):
    """y = act((x - mu)*a + beta) per column, for x, y [M, C]."""
    m_, c_ = x.shape
    for r in prange(m_):
        row = x[r]
        out = y[r]
        for c in range(c_):
            out[c] = act_value(((row[c] - mu[c]) - mu_lo[c]) * a[c] + beta[c], act)


@jit(parallel=True)
def batch_norm_backward(x, dy, mu, mu_lo, a, beta, invstd, dx, dgamma, dbeta, act, training, chunks):
    """Backward of y = act((x - mu)*a + beta) with a = gamma*invstd.

    Writes dgamma/dbeta; dx gets dz = dy*act'(z) first, then (training) the batch-norm
    correction dx = a*(dz - mean(dz) - xhat*mean(dz*xhat)); in eval mode dx = a*dz.
    """
    m_, c_ = x.shape
    part = np.zeros((chunks, 2, c_))
    for t in prange(chunks):
        s0 = part[t, 0]
        s1 = part[t, 1]
        for r in range(t * m_ // chunks, (t + 1) * m_ // chunks):
            xr = x[r]
            gr = dy[r]
            out = dx[r]
            for c in range(c_):
                d = (xr[c] - mu[c]) - mu_lo[c]
                dz = gr[c] * act_grad(d * a[c] + beta[c], act)
                out[c] = dz
                s0[c] += dz
                s1[c] += dz * d * invstd[c]
    for c in range(c_):
        dbeta[c] = part[:, 0, c].sum()
        dgamma[c] = part[:, 1, c].sum()
    if not training:
        for r in prange(m_):
            out = dx[r]
            for c in range(c_):
                out[c] = out[c] * a[c]
        return
    k0 = np.empty(c_)
    k1 = np.empty(c_)
    for c in range(c_):
        k0[c] = dbeta[c] / m_
        k1[c] = dgamma[c] / m_ * invstd[c]
    for r in prange(m_):
        xr = x[r]
        out = dx[r]
        for c in range(c_):
            out[c] = a[c] * (out[c] - k0[c] - ((xr[c] - mu[c]) - mu_lo[c]) * k1[c])


@jit(parallel=True)
def group_moments(x, groups, mean, var):
    """mean/var [N, G] of x [N, HW, C] over each image's (HW, C/G) group, float64, two-pass."""
    n_, m_, c_ = x.shape
    cg = c_ // groups
    count = m_ * cg
    for n in prange(n_):
        acc = np.zeros(c_)
        for r in range(m_):
            row = x[n, r]
            for c in range(c_):
                acc[c] += row[c]
        for g in range(groups):
            mean[n, g] = acc[g * cg:(g + 1) * cg].sum() / count
        acc[:] = 0
        for r in range(m_):
            row = x[n, r]
            for c in range(c_):
                d = row[c] - mean[n, c // cg]
                acc[c] += d * d
        for g in range(groups):
            var[n, g] = acc[g * cg:(g + 1) * cg].sum() / count


@jit(parallel=True)
def group_affine_act(x, mu, mu_lo, a, beta, y, act):
    """y[n] = act((x[n] - mu[n])*a[n] + beta) with mu, a [N, C] and beta [C]."""
    n_, m_, c_ = x.shape
    for i in prange(n_ * m_):
        n = i // m_
        row = x[n, i % m_]
        out = y[n, i % m_]
        mn = mu[n]
        ml = mu_lo[n]
        an = a[n]
        for c in range(c_):
            out[c] = act_value(((row[c] - mn[c]) - ml[c]) * an[c] + beta[c], act)


@jit(parallel=True)
def group_norm_backward(x, dy, mu, mu_lo, a, beta, invstd, gamma, dx, dgamma_n, dbeta_n, act):
    """Backward of group norm + act per image; per-image dgamma/dbeta partials [N, C]."""
    n_, m_, c_ = x.shape
    groups = invstd.shape[1]
    cg = c_ // groups
    count = m_ * cg
    for n in prange(n_):
        s0 = np.zeros(c_)
        s1 = np.zeros(c_)
        mn = mu[n]
        ml = mu_lo[n]
        an = a[n]
        for r in range(m_):
            xr = x[n, r]
            gr = dy[n, r]
            out = dx[n, r]
            for c in range(c_):
                d = (xr[c] - mn[c]) - ml[c]
                dz = gr[c] * act_grad(d * an[c] + beta[c], act)
                out[c] = dz
                s0[c] += dz
                s1[c] += dz * d * invstd[n, c // cg]
        k0 = np.zeros(groups)
        k1 = np.zeros(groups)
        for c in range(c_):
            dbeta_n[n, c] = s0[c]
            dgamma_n[n, c] = s1[c]
            k0[c // cg] += gamma[c] * s0[c] / count
            k1[c // cg] += gamma[c] * s1[c] / count
        for r in range(m_):
            xr = x[n, r]
            out = dx[n, r]
            for c in range(c_):
                g = c // cg
                xhat = ((xr[c] - mn[c]) - ml[c]) * invstd[n, g]
                out[c] = invstd[n, g] * (gamma[c] * out[c] - k0[g] - xhat * k1[g])
