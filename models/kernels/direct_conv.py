"""numba kernels for direct (no im2col) convolution with narrow groups, e.g. G16, in NHWC.

Arrays are viewed with the group split out: activations ``[N, H, W, G, Cg]``, weights
``[G, KH, KW, Cg_in, Cg_out]``. The output channels of a group are processed ``VEC`` (16, or 8
for widths that are odd multiples of 8) at a time, and ``TILE`` neighbouring output pixels of
one row share every weight load: the ``TILE x VEC`` accumulators are a :mod:`jit.block` value,
kept in vector registers on every CPU. ``VEC`` and ``TILE`` are compile-time constants, so each pair is its own kernel,
built by a factory and cached like any other; the tile is chosen per call from the row width
(:func:`tile_for`). Each thread copies the input rows it is about to read into a small
zero-padded scratch, so every pixel (borders included, and images narrower than a tile) runs the
tiled loop with no bounds tests; the copy is one read per input value and kernel row, against
``KW * Cg_out`` multiply-adds. The forward scratch keeps each group's row on its own, so the
``KW * Cg`` taps of an output pixel (kernel column, then channel: the order of the weight's
axes) lie in one run; the kernel reads them through an overlapping view (:func:`tap_view`) in
one loop, and the sums run over the taps in the same order as a loop over kw and c would. On
Zen 1 this took the forward and input-gradient passes of the G16 layers 8-20 % faster than two
nested loops of KW and Cg (short loops, each with its own set-up).

The backward pass reuses :func:`conv` for the input gradient (a stride-1 convolution of ``dy``
with the flipped, transposed kernel, one call per stride phase; see ``conv.py``) and has its own
weight-gradient kernel. Every product is a fused multiply-add (one rounding, the same bits on
every CPU with FMA); nothing is reordered. Elements are addressed through the arrays' strides, in
element offsets from their first element (what :mod:`jit.block` takes).
"""

from __future__ import annotations

import numpy as np

import jit as _jit
from jit import block, prange
from models.kernels.threads import compiled_kernel

VECS = (16, 8)  # output channels per register block: 16 when the group width allows, else 8
# Output pixels per tile, per register block, each with its time per computed pixel relative to
# the fastest, for AVX2's 16 registers (TILE x VEC accumulators in 8-float vectors plus the weight
# vectors and a broadcast). Measured on Zen 1 (one thread, every tile on the same arrays, the G16
# layers of B0/B4-G16-GN and the 56 x 56 layer): per computed pixel, 4 x 16 and 6 x 16 are within
# 3 % of each other (4 ahead on rows of 24-56, 6 on rows of 6-12); 3 x 16 (6 accumulators) takes
# 8-11 % longer per pixel, but on B4's 3 x 3 maps it computes 3 columns where 4 x 16 computes 4:
# the forward of those layers 17-18 % faster. :func:`tile_for` weighs the columns by these costs.
TILES = {16: {4: 1.0, 6: 1.0, 3: 1.1}, 8: {6: 1.0}}
# The same for AVX-512's 32 registers (one 16-float vector per row of the block, broadcasts folded
# into the FMAs): wider tiles, smaller ones kept for narrow rows (see bench/bench_kernels.py).
TILES_WIDE = {16: {12: 1.0, 8: 1.0, 7: 1.05, 6: 1.1, 4: 1.2, 3: 1.3}, 8: {12: 1.0, 6: 1.1}}
# Weight gradient: output pixels (whole rows) per scratch fill, summed in registers between two
# flushes. Each fill copies (block - 1) * sh + KH input rows, so a block of one 56-pixel row copied
# every input row three times for a 3x3 kernel. Measured on Zen 1 over every G16 layer of the three
# G16-GN rows and the 56 x 56 layer row (1 and 2 threads): 64 -> 448 pixels took the sums 4-5 %
# faster (the 56 x 56 layer 7-9 %); 1024 and whole images no faster, as the scratch leaves L2.
BLOCK_PIXELS = 448
_kernels: dict = {}


def vec_for(width: int) -> int | None:
    """The register block for a group width (None: not a multiple of 8)."""
    return next((v for v in VECS if width % v == 0), None)


def tile_table(registers: tuple[int, int] | None = None) -> dict[int, dict[int, float]]:
    """:data:`TILES` or :data:`TILES_WIDE` for a register file of (count, float32 lanes) (default:
    the one compiled for, ``jit.vector_registers``)."""
    return TILES_WIDE if (registers or _jit.vector_registers())[0] >= 32 else TILES


def tile_for(vec: int, wo: int, table: dict | None = None) -> int:
    """Output pixels per tile for rows of ``wo`` pixels: the tile whose whole tiles cover the row
    in the least time, columns computed times the tile's cost per pixel (the narrower on a tie)."""
    costs = (table or tile_table())[vec]
    return min(costs, key=lambda tile: (-(-wo // tile) * tile * costs[tile], tile))


def channel_block(vec: int) -> int:
    """Input channels per register block (CB x VEC = 64 accumulators) of the small-map weight
    gradient (``small_map``); :func:`weight_grad` blocks by taps (:func:`tap_block`)."""
    return 64 // vec


def scratch_width(wo: int, kw: int, sw: int, tile: int) -> int:
    """Scratch columns for ``wo`` output columns: whole tiles of them, and their taps."""
    return (-(-wo // tile) * tile - 1) * sw + kw


def conv(x, w, y, sh, sw, pt, pl, scratch, tile: int, phase=(0, 0, 1, 1)) -> None:
    """y[n, ho, wo, g] = sum over in-image taps (kh, kw) and c of
    x[n, ho*sh - pt + kh, wo*sw - pl + kw, g, c] * w[g, kh, kw, c]  (vectors of Cg_out).
    ``scratch`` [chunks, KH, G, scratch_width(Wo, KW, sw, tile), Cg]: per chunk of output rows,
    a ring of the last KH input rows, zero-padded (input row i sits in slot i % KH, column j at
    pl + j), each group's row on its own. The kernel reads it through :func:`tap_view`, so the
    taps (kw, c) of one output pixel are one run of KW * Cg values. ``phase`` (oy, ox, osh, osw):
    output pixel (ho, wo) goes to y[n, oy + ho*osh, ox + wo*osw], so that the input gradient's
    stride phases write into the whole (contiguous) gradient: a strided view would be a layout of
    its own, another compiled variant of the kernel."""
    key = ("conv", vec_for(y.shape[4]), tile)
    if key not in _kernels:
        _kernels[key] = _make_conv(*key[1:])
    g, kh, kw, cg, cog = w.shape
    _kernels[key](x, np.ascontiguousarray(w).reshape(g, kh, kw * cg, cog), y, sh, sw, pt, pl, scratch,
                  tap_view(scratch, kw), *phase, *phase_shape(y.shape, phase))


def phase_shape(y_shape, phase) -> tuple[int, int]:
    """Output rows and columns of :func:`conv` into ``y`` of ``y_shape`` at ``phase``."""
    oy, ox, osh, osw = phase
    return -(-(y_shape[1] - oy) // osh), -(-(y_shape[2] - ox) // osw)


def tap_view(scratch: np.ndarray, kw: int, sw: int = 1) -> np.ndarray:
    """[..., width, Cg] -> the overlapping view [..., (width - KW) // sw + 1, KW * Cg]: row p holds
    the values at columns p * sw .. p * sw + KW - 1, the taps of an output pixel whose first tap is
    column p * sw (the forward pass indexes it with sw 1, the weight gradient by output pixel)."""
    *lead, width, cg = scratch.shape
    st = scratch.strides
    # np.ndarray over the (contiguous) scratch's buffer: 2.7 us, where as_strided takes 11
    return np.ndarray((*lead, (width - kw) // sw + 1, kw * cg), scratch.dtype, buffer=scratch,
                      strides=(*st[:-2], sw * st[-2], st[-1]))


def weight_grad(x, dy, part, sh, sw, pt, pl, block, scratch) -> None:
    """part[k, g, kh, kw * Cg + c] = chunk k's share of the sum over pixels of
    x[n, ho*sh - pt + kh, wo*sw - pl + kw, g, c] * dy[n, ho, wo, g]; the caller sums the chunks.
    Rows go in blocks of ``block`` output rows, copied with their zero padding into
    ``scratch`` [chunks, (block-1)*sh + KH, (Wo-1)*sw + KW, Cg], so that every tap runs over the
    whole block without bounds tests. ``part`` [chunks, G, KH, KW * Cg, Cog]: the taps (kw, c) of
    a kernel row are one axis, which the kernel takes ``tap_block`` at a time."""
    kc = part.shape[3]
    key = ("weight_grad", vec_for(dy.shape[4]), tap_block(vec_for(dy.shape[4]), kc, part.dtype.itemsize))
    if key not in _kernels:
        _kernels[key] = _make_weight_grad(*key[1:])
    taps = tap_view(scratch, kc // scratch.shape[3], sw)  # [chunks, rows, Wo, KW * Cg]: one row per output pixel
    _kernels[key](x, dy, part, sh, pt, pl, block, scratch, taps)


def tap_block(vec: int, taps: int, itemsize: int = 4, registers: tuple[int, int] | None = None) -> int:
    """Taps per weight-gradient register block: the largest that divides ``taps`` (KW * Cg) with
    at most 12 accumulators of 32 bytes on AVX2 (float32: 6 x 16 or 12 x 8; float64, which the
    gradient checks use: 3 x 16), 24 of 64 bytes on AVX-512 (24 x 16). 6 x 16 took the G16 3x3
    weight gradients 7-14 % faster than 4 x 16 (Zen 1, one thread); a divisor needs no padded taps.
    Each block size is a kernel of its own (about 4 s to compile)."""
    count, lanes = registers or _jit.vector_registers()
    per_row = -(-vec * itemsize // (4 * lanes))  # registers per row of the block
    most = (12 if count < 32 else 24) // per_row
    return next(cb for cb in range(most, 0, -1) if taps % cb == 0)


def _make_conv(VEC: int, TILE: int):
    """The convolution kernel for one register block and tile (see :func:`conv`)."""

    @compiled_kernel(parallel=True, min_elems=0)
    def kernel(x, w, y, sh, sw, pt, pl, scratch, taps, oy, ox, osh, osw, ho_, wo_):
        n_, h_, w_, groups, cg = x.shape
        cog = y.shape[4]  # ho_, wo_: the output rows and columns of the phase (phase_shape)
        kh_, kc_ = w.shape[1], w.shape[2]  # w: [G, KH, KW * Cg, Cog] (contiguous)
        chunks = scratch.shape[0]
        span = -(-wo_ // TILE) * TILE  # output columns computed: whole tiles (the excess is not stored)
        cols = max(0, min(w_, scratch.shape[3] - pl))
        rows = n_ * ho_
        sy = y.strides[0] // y.itemsize, y.strides[1] // y.itemsize, y.strides[2] // y.itemsize, \
            y.strides[3] // y.itemsize, y.strides[4] // y.itemsize
        tst = taps.strides[0] // taps.itemsize, taps.strides[1] // taps.itemsize, \
            taps.strides[2] // taps.itemsize, taps.strides[3] // taps.itemsize
        for k in prange(chunks):
            scratch[k] = 0
            image, filled = -1, 0  # the image in the ring, and one past the last input row copied
            for r in range(k * rows // chunks, (k + 1) * rows // chunks):
                n = r // ho_
                ho = r % ho_
                top = ho * sh - pt
                kh0 = max(0, -top)
                kh1 = min(kh_, h_ - top)
                if n != image:
                    image, filled = n, 0
                for i in range(max(filled, top + kh0), top + kh1):
                    for g in range(groups):
                        for j in range(cols):
                            for c in range(cg):
                                scratch[k, i % kh_, g, pl + j, c] = x[n, i, j, g, c]
                filled = max(filled, top + kh1)
                out_row = n * sy[0] + (oy + ho * osh) * sy[1]
                for g in range(groups):
                    for b in range(0, cog, VEC):
                        for wo in range(0, span, TILE):
                            acc = block.zeros(y, TILE, VEC)
                            for kh in range(kh0, kh1):
                                # the taps (kw, c) of output pixel wo + t: one run in the view
                                first = k * tst[0] + (top + kh) % kh_ * tst[1] + g * tst[2] + wo * sw * tst[3]
                                wrow = ((g * kh_ + kh) * kc_) * cog + b
                                for q in range(kc_):
                                    acc = block.outer_fma(acc, taps, first + q, sw * tst[3], w, wrow + q * cog)
                            block.store(acc, y, out_row + (ox + wo * osw) * sy[2] + g * sy[3] + b * sy[4],
                                        osw * sy[2], min(TILE, wo_ - wo))

    return kernel


def _make_weight_grad(VEC: int, CB: int):
    """The weight-gradient kernel for one register block of CB taps x VEC outputs (see
    :func:`weight_grad`). ``taps`` is the scratch seen as [chunks, rows, Wo, KW * Cg]: row r,
    pixel wo holds the taps of output pixel wo (stride sw) on scratch row r, so the pixel loop
    indexes a view axis of its own, with no index arithmetic to redo per pixel."""

    @compiled_kernel(parallel=True, min_elems=0)
    def kernel(x, dy, part, sh, pt, pl, rows_block, scratch, taps):
        n_, h_, w_, groups, cg = x.shape
        ho_, wo_, cog = dy.shape[1], dy.shape[2], dy.shape[4]
        chunks, kh_, kc_ = part.shape[0], part.shape[2], part.shape[3]
        per_image = -(-ho_ // rows_block)
        items = n_ * per_image
        hp = scratch.shape[1]
        cols = max(0, min(w_, scratch.shape[2] - pl))
        sd = dy.strides[0] // dy.itemsize, dy.strides[1] // dy.itemsize, dy.strides[2] // dy.itemsize, \
            dy.strides[3] // dy.itemsize
        tst = taps.strides[0] // taps.itemsize, taps.strides[1] // taps.itemsize, taps.strides[2] // taps.itemsize
        for k in prange(chunks):
            part[k] = 0
            scratch[k] = 0
            for item in range(k * items // chunks, (k + 1) * items // chunks):
                n = item // per_image
                ho0 = item % per_image * rows_block
                rows = min(rows_block, ho_ - ho0)
                for g in range(groups):
                    for i in range(hp):  # scratch row i is x row ho0*sh - pt + i (zero outside the image)
                        row = ho0 * sh - pt + i
                        if 0 <= row < h_:
                            for j in range(cols):
                                for c in range(cg):
                                    scratch[k, i, pl + j, c] = x[n, row, j, g, c]
                        else:
                            for j in range(cols):
                                for c in range(cg):
                                    scratch[k, i, pl + j, c] = 0
                    for kh in range(kh_):
                        for q0 in range(0, kc_, CB):
                            for b in range(0, cog, VEC):
                                acc = block.zeros(part, CB, VEC)
                                for q in range(rows):
                                    trow = k * tst[0] + (q * sh + kh) * tst[1] + q0
                                    drow = n * sd[0] + (ho0 + q) * sd[1] + g * sd[3] + b
                                    for wo in range(wo_):
                                        acc = block.outer_fma(acc, taps, trow + wo * tst[2], 1, dy, drow + wo * sd[2])
                                block.add_to(acc, part, (((k * groups + g) * kh_ + kh) * kc_ + q0) * cog + b, cog)

    return kernel
