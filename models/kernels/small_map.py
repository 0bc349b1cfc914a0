"""numba kernels for grouped (G16) convolutions on small feature maps, where the pixel-tiled
kernels of ``direct_conv`` waste most of their work.

On a 3 x 3 map under a 5 x 5 kernel only 9 of the 25 taps of a pixel fall inside the image,
and the tiled weight gradient, which sums a few pixels per register flush, spends its time
flushing and multiplying zero padding. :func:`group_weight_grad` instead makes (group, kernel
row) pairs the work items, sums over whole images with each pixel's in-image taps only, and
needs no partial sums. A shape-only rule picks it (:func:`suits_group_weight_grad`), so every
thread count computes the same bits. Products are fused multiply-adds in a :mod:`jit.block`
register block, nothing else is reordered; nothing is cached but the compiled kernels.

(A forward kernel of the same kind, 4 images side by side in the register block over each
pixel's in-image taps, was tried: 2x faster than the tiled one on B4's 3 x 3 maps called in a
loop, but 1.2-1.6x slower in a training step's order, where the block's inputs and weights are
no longer in cache; it only won on 2 x 2 maps, about 1 % of a B0-G16-GN step.)
"""

from __future__ import annotations

from jit import block, prange
from models.kernels.direct_conv import channel_block, vec_for
from models.kernels.threads import compiled_kernel

SMALL_MAP, MIN_GROUPS = 144, 8  # see suits_group_weight_grad()
GROUP_PIXELS = 256  # group_weight_grad: output pixels (whole images) summed in registers between two flushes
_kernels: dict = {}


def eligible(groups: int, cg: int, cog: int) -> bool:
    """Whether :func:`group_weight_grad` can compute a grouped weight gradient: output group widths of
    whole register blocks, input group widths of whole channel blocks."""
    vec = vec_for(cog)
    return vec is not None and cg % channel_block(vec) == 0 and groups > 0


def suits_group_weight_grad(ho: int, wo: int, groups: int, cg: int, cog: int) -> bool:
    """Whether the weight gradient goes through :func:`group_weight_grad`: small feature maps
    (at most ``SMALL_MAP`` output pixels per image) with ``MIN_GROUPS`` groups or more (the work
    items), whose input channels are whole channel blocks. A rule on the shape alone (see
    ``gemm``). Measured on Zen 1, 2 threads, every G16 layer of B4-G16-GN (96 px, batch 8) and
    B0-G16-GN (64 px, batch 64): 0.2-0.9x the chunked kernel's time on maps of 12 x 12 and
    less (B4's 3 x 3 maps under 5 x 5 kernels: 2.0 against 4.2 ms); at par or slower on larger
    maps and with 6 groups or fewer; the weight gradients of those two models together 99 ->
    73 and 110 -> 78 ms per step (one thread, B4: 167 -> 124 ms)."""
    vec = vec_for(cog)
    return vec is not None and ho * wo <= SMALL_MAP and groups >= MIN_GROUPS and cg % channel_block(vec) == 0


def group_weight_grad(x, dy, out, sh, sw, pt, pl) -> None:
    """out[g, kh, kw, c] = the sum over images and output pixels of
    x[n, ho*sh - pt + kh, wo*sw - pl + kw, g, c] * dy[n, ho, wo, g] (vectors of Cg_out), over the
    pixels whose tap falls inside the image only. Work items are (group, kernel row) pairs, each
    summing over every image (in blocks of whole images of about ``GROUP_PIXELS`` output pixels,
    which stay in cache across the taps; the registers are added into ``out`` after each block),
    so no partial sums and no zero padding are needed: on small maps (3 x 3 pixels under a 5 x 5
    kernel, 9 of 25 taps inside) the pixel-chunked :func:`weight_grad` would flush its registers
    after a handful of pixels and multiply zeros. Each output is one chain of additions in an
    order fixed by the shape, whatever the thread count."""
    key = ("group_weight_grad", vec_for(dy.shape[4]))
    if key not in _kernels:
        _kernels[key] = _make_group_weight_grad(key[1], channel_block(key[1]))
    _kernels[key](x, dy, out, sh, sw, pt, pl, max(1, GROUP_PIXELS // (dy.shape[1] * dy.shape[2])))


def _make_group_weight_grad(VEC: int, CB: int):
    """The by-group weight-gradient kernel for one register block (see :func:`group_weight_grad`)."""

    @compiled_kernel(parallel=True, min_elems=0)
    def kernel(x, dy, out, sh, sw, pt, pl, images):
        n_, h_, w_, groups, cg = x.shape
        ho_, wo_, cog = dy.shape[1], dy.shape[2], dy.shape[4]
        kh_, kw_ = out.shape[1], out.shape[2]
        sx = x.strides[0] // x.itemsize, x.strides[1] // x.itemsize, x.strides[2] // x.itemsize, \
            x.strides[3] // x.itemsize, x.strides[4] // x.itemsize
        sd = dy.strides[0] // dy.itemsize, dy.strides[1] // dy.itemsize, dy.strides[2] // dy.itemsize, \
            dy.strides[3] // dy.itemsize
        so = out.strides[0] // out.itemsize, out.strides[1] // out.itemsize, out.strides[2] // out.itemsize, \
            out.strides[3] // out.itemsize
        for item in prange(groups * kh_):
            g = item // kh_
            kh = item % kh_
            q0 = max(0, -((kh - pt) // sh))  # output rows whose tap row lies inside the image
            q1 = min(ho_, (h_ - 1 + pt - kh) // sh + 1)
            for n0 in range(0, n_, images):  # blocks of images: their rows stay in cache across the taps
                for kw in range(kw_):
                    w0 = max(0, -((kw - pl) // sw))
                    w1 = min(wo_, (w_ - 1 + pl - kw) // sw + 1)
                    for c0 in range(0, cg, CB):
                        for b in range(0, cog, VEC):
                            acc = block.zeros(out, CB, VEC)
                            for n in range(n0, min(n_, n0 + images)):
                                for q in range(q0, q1):
                                    xrow = n * sx[0] + (q * sh - pt + kh) * sx[1] + g * sx[3] + c0 * sx[4]
                                    drow = n * sd[0] + q * sd[1] + g * sd[3] + b
                                    for wo in range(w0, w1):
                                        acc = block.outer_fma(acc, x, xrow + (wo * sw - pl + kw) * sx[2], sx[4],
                                                              dy, drow + wo * sd[2])
                            dst = g * so[0] + kh * so[1] + kw * so[2] + c0 * so[3] + b
                            if n0 == 0:
                                block.store(acc, out, dst, so[3], CB)
                            else:
                                block.add_to(acc, out, dst, so[3])

    return kernel
