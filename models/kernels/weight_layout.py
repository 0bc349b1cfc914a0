"""numba kernels that move a grouped convolution's weights between torch's layout and the layouts the
direct kernels read, in parallel over the groups.

Parameters stay OIHW (``[G*Cog, Cg, KH, KW]``, torch's; checkpoints and optimizers see only that).
The direct convolution reads ``[G, KH, KW, Cg, Cog]`` (vectors along the output channels), its input
gradient the flipped, transposed taps ``[G, KH', KW', Cog, Cg]``, and the weight-gradient kernels
write ``[G, KH, KW, Cg, Cog]`` (or per-chunk partials of it). numpy's ``copyto`` of a 5-D transposed
view runs one strided element at a time on one thread (1.1 M values of B4's widest 5 x 5 G16 layer:
0.9 ms, 7x a plain copy); these work per group (a block of ``Cog * Cg * KH * KW`` values that stays in
the L1 cache), on every thread. Pure copies and in-order sums: the same bits as the numpy
expressions they replace (tested).
"""

from __future__ import annotations

from jit import prange
from models.kernels.threads import compiled_kernel

MIN_ELEMS = 1 << 15  # weights smaller than this are moved on one thread


@compiled_kernel(parallel=True, min_elems=MIN_ELEMS)
def to_taps(w, out):
    """out[g, kh, kw, c, o] = w[g, o, c, kh, kw]: OIHW (as [G, Cog, Cg, KH, KW]) -> the forward's taps."""
    g_, o_, c_, kh_, kw_ = w.shape
    for g in prange(g_):
        for kh in range(kh_):
            for kw in range(kw_):
                for c in range(c_):
                    for o in range(o_):
                        out[g, kh, kw, c, o] = w[g, o, c, kh, kw]


@compiled_kernel(parallel=True, min_elems=MIN_ELEMS)
def to_input_grad_taps(w, out, r0, rstep, c0, cstep):
    """out[g, i, j, o, c] = w[g, o, c, r0 + i*rstep, c0 + j*cstep] for the taps of ``out``'s shape:
    OIHW (as [G, Cog, Cg, KH, KW]) -> the input gradient's taps of one stride phase (flipped: negative
    steps), transposed."""
    g_, o_, c_ = w.shape[0], w.shape[1], w.shape[2]
    ni, nj = out.shape[1], out.shape[2]
    for g in prange(g_):
        for i in range(ni):
            for j in range(nj):
                kh, kw = r0 + i * rstep, c0 + j * cstep
                for o in range(o_):
                    for c in range(c_):
                        out[g, i, j, o, c] = w[g, o, c, kh, kw]


@compiled_kernel(parallel=True, min_elems=MIN_ELEMS)
def from_taps(parts, out):
    """out[g, o, c, kh, kw] = parts[0, g, kh, kw, c, o] + parts[1, ...] + ... (added in order, as
    numpy's sum over the first axis adds them): weight-gradient partials [P, G, KH, KW, Cg, Cog] ->
    OIHW (as [G, Cog, Cg, KH, KW])."""
    p_, g_, kh_, kw_, c_, o_ = parts.shape
    for g in prange(g_):
        for kh in range(kh_):
            for kw in range(kw_):
                for c in range(c_):
                    for o in range(o_):
                        total = parts[0, g, kh, kw, c, o]
                        for p in range(1, p_):
                            total += parts[p, g, kh, kw, c, o]
                        out[g, o, c, kh, kw] = total


__all__ = ["from_taps", "to_input_grad_taps", "to_taps"]
