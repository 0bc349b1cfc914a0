"""numba kernels for direct (no im2col) convolution with narrow groups, e.g. G16, in NHWC.

Arrays are viewed with the group split out: activations ``[N, H, W, G, Cg]``, weights
``[G, KH, KW, Cg_in, Cg_out]``. The output channels of a group are processed ``VEC`` at a time
(the group width must be a multiple of ``VEC``), and ``TILE`` neighbouring output pixels of one
row share every weight load: the ``TILE x VEC`` accumulators stay in vector registers, which
LLVM's SLP vectoriser packs once the two innermost loops have constant trip counts (see
``_jit``). Out-of-image taps are skipped, so the input needs no padded copy: interior pixels run
the tiled loop, the pixels within reach of the left/right border run one at a time with their
valid taps only.

The backward pass reuses :func:`conv` for the input gradient (a stride-1 convolution of ``dy``
with the flipped, transposed kernel, one call per stride phase; see ``conv.py``) and has its own
weight-gradient kernel. Products are contracted to FMAs (``fastmath={"contract"}``), as BLAS
does; nothing else is reordered.
"""

from __future__ import annotations

import numpy as np

from models._jit import CONTRACT, jit, prange, vector_registers

VEC = 16  # output channels per register block (two AVX2 / one AVX-512 register of float32)
TILE = 8 if vector_registers() >= 32 else 4  # output pixels per tile: TILE * 2 + 3 registers
CB = 4  # input channels per weight-gradient register block


@jit(parallel=True, fastmath=CONTRACT)
def conv(x, w, y, sh, sw, pt, pl):
    """y[n, ho, wo, g] = sum over in-image taps (kh, kw) and c of
    x[n, ho*sh - pt + kh, wo*sw - pl + kw, g, c] * w[g, kh, kw, c]  (vectors of Cg_out)."""
    n_, h_, w_, groups, cg = x.shape
    ho_, wo_, cog = y.shape[1], y.shape[2], y.shape[4]
    kh_, kw_ = w.shape[1], w.shape[2]
    lo = min(-(-pl // sw), wo_)  # first column whose every tap is inside
    hi = max(min(wo_, (w_ - kw_ + pl) // sw + 1), lo)  # one past the last such column
    for r in prange(n_ * ho_):
        n = r // ho_
        ho = r % ho_
        kh0 = max(0, pt - ho * sh)
        kh1 = min(kh_, h_ + pt - ho * sh)
        acc = np.empty((TILE, VEC), y.dtype)
        for g in range(groups):
            for b in range(0, cog, VEC):
                wo = 0
                while wo < wo_:
                    if wo >= lo and wo + TILE <= hi:
                        acc[:] = 0
                        for kh in range(kh0, kh1):
                            row = ho * sh - pt + kh
                            for kw in range(kw_):
                                col = wo * sw - pl + kw
                                for c in range(cg):
                                    for t in range(TILE):
                                        xv = x[n, row, col + t * sw, g, c]
                                        for v in range(VEC):
                                            acc[t, v] += xv * w[g, kh, kw, c, b + v]
                        for t in range(TILE):
                            for v in range(VEC):
                                y[n, ho, wo + t, g, b + v] = acc[t, v]
                        wo += TILE
                    else:
                        kw0 = max(0, pl - wo * sw)
                        kw1 = min(kw_, w_ + pl - wo * sw)
                        acc[0] = 0
                        for kh in range(kh0, kh1):
                            row = ho * sh - pt + kh
                            for kw in range(kw0, kw1):
                                col = wo * sw - pl + kw
                                for c in range(cg):
                                    xv = x[n, row, col, g, c]
                                    for v in range(VEC):
                                        acc[0, v] += xv * w[g, kh, kw, c, b + v]
                        for v in range(VEC):
                            y[n, ho, wo, g, b + v] = acc[0, v]
                        wo += 1


@jit(parallel=True, fastmath=CONTRACT)
def weight_grad(x, dy, part, sh, sw, pt, pl):
    """part[k, g, kh, kw, c] = chunk k's share (rows of dy) of
    sum over pixels of x[n, ho*sh - pt + kh, wo*sw - pl + kw, g, c] * dy[n, ho, wo, g]; the caller
    sums the chunks."""
    n_, h_, w_, groups, cg = x.shape
    ho_, wo_, cog = dy.shape[1], dy.shape[2], dy.shape[4]
    chunks, _, kh_, kw_ = part.shape[0], part.shape[1], part.shape[2], part.shape[3]
    rows = n_ * ho_
    for k in prange(chunks):
        part[k] = 0
        acc = np.empty((CB, VEC), part.dtype)
        for r in range(k * rows // chunks, (k + 1) * rows // chunks):
            n = r // ho_
            ho = r % ho_
            for kh in range(max(0, pt - ho * sh), min(kh_, h_ + pt - ho * sh)):
                row = ho * sh - pt + kh
                for kw in range(kw_):
                    wlo = max(0, -(-(pl - kw) // sw))
                    whi = min(wo_, (w_ - 1 + pl - kw) // sw + 1)
                    for g in range(groups):
                        for c0 in range(0, cg, CB):
                            for b in range(0, cog, VEC):
                                acc[:] = 0
                                for wo in range(wlo, whi):
                                    col = wo * sw - pl + kw
                                    for u in range(CB):
                                        xv = x[n, row, col, g, c0 + u]
                                        for v in range(VEC):
                                            acc[u, v] += xv * dy[n, ho, wo, g, b + v]
                                for u in range(CB):
                                    for v in range(VEC):
                                        part[k, g, kh, kw, c0 + u, b + v] += acc[u, v]
