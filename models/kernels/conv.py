"""numba kernels for convolutions in NHWC: depthwise forward/backward, im2col and col2im, and the
grouped weight gradient as im2col + one GEMM per group (:func:`im2col_weight_grad`).

Depthwise weights are ``[KH, KW, C]`` so the innermost loop runs over contiguous channels.
``pt``/``pl`` are the top/left paddings; out-of-image taps are skipped (zero padding).
"""

from __future__ import annotations

import numpy as np

from jit import prange
from models.kernels import gemm as _gemm
from models.kernels.threads import compiled_kernel


@compiled_kernel(parallel=True)
def dw_forward(x, w, y, sh, sw, pt, pl):
    """y[n,ho,wo,c] = sum_kh,kw x[n, ho*sh-pt+kh, wo*sw-pl+kw, c] * w[kh,kw,c]."""
    n_, h_, w_, c_ = x.shape
    ho_, wo_ = y.shape[1], y.shape[2]
    kh_, kw_ = w.shape[0], w.shape[1]
    for r in prange(n_ * ho_):
        n = r // ho_
        ho = r % ho_
        for wo in range(wo_):
            out = y[n, ho, wo]
            out[:] = 0
            for kh in range(kh_):
                hi = ho * sh - pt + kh
                if hi < 0 or hi >= h_:
                    continue
                for kw in range(kw_):
                    wi = wo * sw - pl + kw
                    if wi < 0 or wi >= w_:
                        continue
                    src = x[n, hi, wi]
                    wk = w[kh, kw]
                    for c in range(c_):
                        out[c] += src[c] * wk[c]


@compiled_kernel(parallel=True)
def dw_backward_input(dy, w, dx, sh, sw, pt, pl):
    """dx[n,hi,wi,c] = sum over the taps that read (hi, wi) of dy * w (a gather, no races)."""
    n_, h_, w_, c_ = dx.shape
    ho_, wo_ = dy.shape[1], dy.shape[2]
    kh_, kw_ = w.shape[0], w.shape[1]
    for r in prange(n_ * h_):
        n = r // h_
        hi = r % h_
        for wi in range(w_):
            out = dx[n, hi, wi]
            out[:] = 0
            for kh in range(kh_):
                t = hi + pt - kh
                if t < 0 or t % sh != 0:
                    continue
                ho = t // sh
                if ho >= ho_:
                    continue
                for kw in range(kw_):
                    u = wi + pl - kw
                    if u < 0 or u % sw != 0:
                        continue
                    wo = u // sw
                    if wo >= wo_:
                        continue
                    src = dy[n, ho, wo]
                    wk = w[kh, kw]
                    for c in range(c_):
                        out[c] += src[c] * wk[c]


@compiled_kernel(parallel=True)
def dw_backward_weight(x, dy, partial, sh, sw, pt, pl):
    """partial[t] = this chunk's sum of x * dy per tap; the caller sums over chunks."""
    n_, h_, w_, c_ = x.shape
    ho_, wo_ = dy.shape[1], dy.shape[2]
    kh_, kw_ = partial.shape[1], partial.shape[2]
    chunks = partial.shape[0]
    rows = n_ * ho_
    for t in prange(chunks):
        acc = partial[t]
        acc[:] = 0
        for r in range(t * rows // chunks, (t + 1) * rows // chunks):
            n = r // ho_
            ho = r % ho_
            for kh in range(kh_):
                hi = ho * sh - pt + kh
                if hi < 0 or hi >= h_:
                    continue
                for wo in range(wo_):
                    g = dy[n, ho, wo]
                    for kw in range(kw_):
                        wi = wo * sw - pl + kw
                        if wi < 0 or wi >= w_:
                            continue
                        src = x[n, hi, wi]
                        a = acc[kh, kw]
                        for c in range(c_):
                            a[c] += src[c] * g[c]


@compiled_kernel(parallel=True)
def im2col(x, cols, ho_, wo_, kh_, kw_, sh, sw, pt, pl, dh, dw):
    """cols[g, p, (kh*KW+kw)*Cg + c] = x[n, hi, wi, g*Cg + c] with hi = ho*sh - pt + kh*dh (``dh``, ``dw``:
    the dilation; 1 for none), zero outside the image."""
    n_, h_, w_, _ = x.shape
    groups, _, k = cols.shape
    cg = k // (kh_ * kw_)
    for r in prange(n_ * ho_):
        n = r // ho_
        ho = r % ho_
        for wo in range(wo_):
            p = r * wo_ + wo
            for kh in range(kh_):
                hi = ho * sh - pt + kh * dh
                for kw in range(kw_):
                    wi = wo * sw - pl + kw * dw
                    base = (kh * kw_ + kw) * cg
                    inside = 0 <= hi < h_ and 0 <= wi < w_
                    for g in range(groups):
                        dst = cols[g, p]
                        if inside:
                            src = x[n, hi, wi]
                            for c in range(cg):
                                dst[base + c] = src[g * cg + c]
                        else:
                            for c in range(cg):
                                dst[base + c] = 0


@compiled_kernel(parallel=True)
def col2im(dcols, dx, ho_, wo_, kh_, kw_, sh, sw, pt, pl, dh, dw):
    """dx = the adjoint of im2col (dilation ``dh``, ``dw``): scatter-add column gradients back (one image per
    thread)."""
    n_, h_, w_, _ = dx.shape
    groups, _, k = dcols.shape
    cg = k // (kh_ * kw_)
    for n in prange(n_):
        dx[n] = 0
        for ho in range(ho_):
            for wo in range(wo_):
                p = (n * ho_ + ho) * wo_ + wo
                for kh in range(kh_):
                    hi = ho * sh - pt + kh * dh
                    if hi < 0 or hi >= h_:
                        continue
                    for kw in range(kw_):
                        wi = wo * sw - pl + kw * dw
                        if wi < 0 or wi >= w_:
                            continue
                        base = (kh * kw_ + kw) * cg
                        dst = dx[n, hi, wi]
                        for g in range(groups):
                            src = dcols[g, p]
                            for c in range(cg):
                                dst[g * cg + c] += src[base + c]


def im2col_weight_grad(x5, dy5, kh, kw, sh, sw, pt, pl, cols, out):
    """out [G, KH*KW*Cg, Cog] = the weight gradient of a grouped convolution of ``x5`` [N, H, W, G, Cg]
    with output gradient ``dy5`` [N, Ho, Wo, G, Cog]: the input's columns into ``cols``
    [G, N*Ho*Wo, KH*KW*Cg], then cols[g]^T @ dy[g] for each group (BLAS)."""
    n, h, w, g, cg = x5.shape
    cog = dy5.shape[4]
    im2col(np.ascontiguousarray(x5).reshape(n, h, w, g * cg), cols, dy5.shape[1], dy5.shape[2], kh, kw, sh, sw, pt, pl,
           1, 1)
    return _gemm.matmul_batched(cols.transpose(0, 2, 1), dy5.reshape(-1, g, cog).transpose(1, 0, 2), out)
