"""numba kernels for the products of a 1x1 convolution: ``y = a @ w`` on row-major ``[M, K]``
activations (NHWC pixels as rows) and a ``[K, N]`` weight, and the weight gradient
``a^T @ b`` summed over the M rows, both reading the activations in place (no packing).

The forward pass is ``x @ W`` and the input gradient ``dy @ W^T``: the same kernel, given the
weight in ``[Cin, Cout]`` or in its stored ``[Cout, Cin]`` order. Register block: ``TILE`` rows
of ``a`` times ``VEC`` columns of ``w`` (16 when N allows, else 8), a :mod:`jit.block` value
that LLVM keeps in vector registers on every CPU: each step along K loads ``VEC`` weights and
broadcasts one value per row into one fused multiply-add per row. ``TILE`` is sized from the
register file the kernels are compiled for (:func:`tiles`): 6 x 16 (12 ymm accumulators) and
8 x 8 on AVX2's 16 registers, 24 x 16 and 24 x 8 on AVX-512's 32. The weight gradient uses the
same block turned around: each step is one row (pixel), broadcasting ``TILE`` adjacent values of
``a``'s row and loading ``VEC`` of ``b``'s; its ``TILE`` is the largest candidate dividing K.

Cache blocking: each thread takes a contiguous run of rows and walks it in blocks of
``ROWS_BLOCK`` rows; within a block, for each slice of ``K_BLOCK`` along K and each ``VEC``
columns, the weight panel (``K_BLOCK x VEC``, at most 16 KiB) stays in L1 while the block's
rows are read from L2. Slices after the first resume from the partial sums stored in ``y``, so
every output is the same chain of FMAs over k = 0, 1, ... whatever the blocking, the tile or the
thread count (results depend on none of them, nor on the CPU, as long as it has FMA). Rows after
the last whole tile are computed by the caller as one zero-padded tile, so the tiled loop has
no bounds tests. The weight gradient splits the rows into runs with one partial ``[K, N]`` each
(summed by the caller, in a fixed order), and sums blocks of ``PIXELS_BLOCK`` rows in registers
between two additions into the partial. Nothing is cached but the compiled kernels (one per
register block and kind, built by a factory).

Whether a product goes through these kernels or through BLAS is :func:`suits` and
:func:`suits_weight_grad` (rules on the shape, measured on Zen 1), and then the machine's own
measurement where one was recorded (``models.kernels.wisdom``).
"""

from __future__ import annotations

import numpy as np

import jit as _jit
from jit import block, prange
from models.kernels import threads as _threads
from models.kernels.threads import compiled_kernel

ROWS_BLOCK = 96  # rows of ``a`` per cache block (a multiple of every forward tile)
K_BLOCK = 256  # K per slice: the weight panel K_BLOCK x VEC stays in L1
PIXELS_BLOCK = 512  # weight gradient: rows summed in registers between two flushes (both blocks in L2)
MANY_ROWS, FEW_ROWS, NARROW, MIN_WORK = 1 << 16, 896, 16, 1 << 20  # see suits()
TRANSPOSE_ROWS = 1024  # see suits(): rows over which the forward's weight transposition pays off
LONG_ROWS, MIN_ROWS_WGRAD, WGRAD_ENTRIES = 1 << 14, 2048, 1 << 14  # see suits_weight_grad()
_kernels: dict = {}


def suits(m: int, k: int, n: int, dtype, transposes_weight: bool = False) -> bool:
    """Whether ``[M, K] @ [K, N]`` goes through this kernel rather than BLAS (a rule on the shape
    alone, so every thread count computes the same bits). Measured on Zen 1 (1 and 2 threads,
    every pointwise shape of tiny, B0, B0-G16-GN and B4-G16-GN in the benchmark, ``bench_models``
    sizes): the kernel wins where BLAS's packing is not amortised, on few rows (M <= 896: 0.4 to
    0.9x BLAS's time, once the product is big enough to matter, >= 1 M multiply-adds) and on
    narrow outputs (N <= 16: 0.55 to 0.95x; also N <= 32 over M >= 65536 rows); BLAS keeps the
    mid-sized and long products with wider outputs (the kernel is at par to 1.3x slower there).
    ``transposes_weight``: the forward pass first copies the stored ``[N, K]`` weight into
    ``[K, N]``, about 1.3 ns per element (3.5x a plain copy), which only pays off over
    ``TRANSPOSE_ROWS`` rows or more (the input gradient uses the weight as stored). K < 16 (a
    stem) stays with BLAS, and so does float64 (16 doubles per row of the block need twice the
    registers)."""
    if not (eligible(m, k, n, dtype) and k >= 16):
        return False
    if transposes_weight and m < TRANSPOSE_ROWS:
        return False
    return n <= NARROW or (m <= FEW_ROWS and m * k * n >= MIN_WORK) or (m >= MANY_ROWS and n <= 2 * NARROW)


def eligible(m: int, k: int, n: int, dtype) -> bool:
    """Whether :func:`matmul` can compute ``[M, K] @ [K, N]`` (float32, N a multiple of 8)."""
    return np.dtype(dtype) == np.float32 and n % 8 == 0 and m > 0


def eligible_weight_grad(m: int, k: int, n: int, dtype) -> bool:
    """Whether :func:`weight_grad` can compute ``a^T @ b`` for a [M, K], b [M, N] (float32, N a
    multiple of 8, K whole tiles of its register block)."""
    vec = vec_for(n)
    return np.dtype(dtype) == np.float32 and vec is not None and grad_tile(k, vec) is not None and m > 0


def suits_weight_grad(m: int, k: int, n: int, dtype) -> bool:
    """Whether ``a^T @ b`` for a [M, K], b [M, N] goes through :func:`weight_grad`: reductions over
    ``LONG_ROWS`` rows or more, or over ``MIN_ROWS_WGRAD`` rows into a result of at least
    ``WGRAD_ENTRIES`` entries, whose K is whole tiles. Measured on Zen 1 (1 and 2 threads, the
    benchmark's pointwise shapes): 0.55-0.7x BLAS's time (and 0.85-0.95x the direct kernel's) on
    B0-224's [3136 pixels] x [80..672 channels]; 0.6-0.85x the direct kernel on 16384-50176
    pixels of 24-144 channels, when the result's wider side is N (the caller tries that
    orientation first); BLAS or the direct kernel keep the shorter reductions and the small results."""
    if not eligible_weight_grad(m, k, n, dtype):
        return False
    return m >= LONG_ROWS or m >= MIN_ROWS_WGRAD and k * n >= WGRAD_ENTRIES


def tiles(registers: tuple[int, int] | None = None) -> dict[int, tuple[int, ...]]:
    """Rows per register block for each block width (16 or 8 columns), widest first, for a register
    file of (count, float32 lanes) (default: the one compiled for, ``jit.vector_registers``): the
    accumulators, the weight vectors of one row and a broadcast within the registers. The forward
    pass uses the first, the weight gradient the first that divides K."""
    count, lanes = registers or _jit.vector_registers()
    if count >= 32:  # 24 accumulator registers: one per row of 16 lanes, two of 8 (AVX-512 held to 256 bits)
        return {16: (24, 16, 8, 6) if lanes >= 16 else (12, 8, 6, 4, 2), 8: (24, 16, 8, 6)}
    return {16: (6, 4, 2), 8: (8, 4, 2)}


def vec_for(n: int) -> int | None:
    """The register block width for N output columns (None: N is not a multiple of 8)."""
    return next((v for v in (16, 8) if n % v == 0), None)


def grad_tile(k: int, vec: int) -> int | None:
    """Rows of the weight gradient's register block for K columns of ``a`` (None: no tile divides K)."""
    return next((t for t in tiles()[vec] if k % t == 0), None)


def matmul(a: np.ndarray, w: np.ndarray, y: np.ndarray, chunks: int) -> None:
    """y = a @ w for C-contiguous a [M, K], w [K, N], y [M, N] (N a multiple of 8), split into
    ``chunks`` parts (one per thread, normally): runs of whole row tiles, or, where there are fewer
    tiles than two per part, the columns too (:func:`split`). The last ``M % TILE`` rows go through
    the same kernel as one zero-padded tile (a small copy), so they get the same chain of FMAs as
    every other row; the tile is one that divides a short M (:func:`forward_tile`)."""
    vec = vec_for(w.shape[1])
    m = a.shape[0]
    tile = forward_tile(m, vec)
    key = ("matmul", vec, tile)
    if key not in _kernels:
        _kernels[key] = _make_matmul(vec, tile)
    run = getattr(_kernels[key], "compiled", _kernels[key])  # launched here, on the threads chosen below
    tail = m % tile
    if m >= tile:
        row_parts, col_parts = split(m // tile, w.shape[1] // vec, chunks)
        _threads.use_threads(min(row_parts * col_parts, _threads.get_num_threads()))
        run(a, w, y, row_parts, col_parts)
    if tail:
        pad = np.zeros((tile, a.shape[1]), a.dtype)
        pad[:tail] = a[m - tail:]
        out = np.empty((tile, y.shape[1]), y.dtype)
        _threads.use_threads(1)  # (no fork and join of the other threads for one tile)
        run(pad, w, out, 1, 1)
        y[m - tail:] = out[:tail]


def forward_tile(m: int, vec: int) -> int:
    """Rows of the forward's register block for M rows: the largest candidate that divides a short M
    (under 64 tiles: the padded tail would be a large share, computed on one thread), else the first."""
    candidates = tiles()[vec]
    if m >= 64 * candidates[0]:
        return candidates[0]
    return next((t for t in candidates if m % t == 0), candidates[0])


def split(row_tiles: int, col_blocks: int, chunks: int) -> tuple[int, int]:
    """(row parts, column parts) of a product of ``row_tiles`` x ``col_blocks`` blocks over ``chunks``
    parts: rows alone while every part gets two tiles or more, else columns too (at most one part
    per block). Every output is the same chain of FMAs whichever part computes it."""
    chunks = max(1, min(chunks, row_tiles * col_blocks))
    if row_tiles >= 2 * chunks:
        return chunks, 1
    col_parts = min(col_blocks, chunks)
    return max(1, min(row_tiles, chunks // col_parts)), col_parts


def _make_matmul(VEC: int, TILE: int):
    """The kernel for one register block (see :func:`matmul`)."""

    @compiled_kernel(parallel=True, min_elems=0)
    def kernel(a, w, y, row_parts, col_parts):
        m_, k_ = a.shape
        n_ = w.shape[1]
        slices, nb = -(-k_ // K_BLOCK), n_ // VEC
        tiles = m_ // TILE  # (the caller does the rows after the last whole tile)
        for p in prange(row_parts * col_parts):
            rp, cp = p // col_parts, p % col_parts
            lo, tiled = rp * tiles // row_parts * TILE, (rp + 1) * tiles // row_parts * TILE
            b0, cols = cp * nb // col_parts, (cp + 1) * nb // col_parts - cp * nb // col_parts
            # (row block, K slice, column block) as one flat loop
            for job in range(-(-(tiled - lo) // ROWS_BLOCK) * slices * cols):
                r0 = lo + job // (slices * cols) * ROWS_BLOCK
                r1 = min(r0 + ROWS_BLOCK, tiled)
                c0 = job // cols % slices * K_BLOCK
                c1 = min(c0 + K_BLOCK, k_)
                b = (b0 + job % cols) * VEC
                for r in range(r0, r1, TILE):
                    acc = block.zeros(y, TILE, VEC)
                    if c0 > 0:
                        acc = block.load(acc, y, r * n_ + b, n_)
                    for c in range(c0, c1):
                        acc = block.outer_fma(acc, a, r * k_ + c, k_, w, c * n_ + b)
                    block.store(acc, y, r * n_ + b, n_, TILE)

    return kernel


def weight_grad(a: np.ndarray, b: np.ndarray, part: np.ndarray) -> None:
    """part[p] = a[rows p]^T @ b[rows p] for C-contiguous a [M, K], b [M, N] (K a multiple of
    a tile, N of the register block), the rows in ``part.shape[0]`` contiguous runs (one per
    thread and chunk): the caller sums the chunks. Register block: ``TILE`` columns of ``a``
    (broadcast, adjacent in memory) times ``VEC`` columns of ``b``; each run goes in blocks of
    ``PIXELS_BLOCK`` rows (both operands' block in L2), summed in registers, then added to the
    run's partial."""
    vec = vec_for(b.shape[1])
    key = ("weight_grad", vec, grad_tile(a.shape[1], vec))
    if key not in _kernels:
        _kernels[key] = _make_weight_grad(*key[1:])
    _kernels[key](a, b, part)


def _make_weight_grad(VEC: int, TILE: int):
    """The weight-gradient kernel for one register block (see :func:`weight_grad`)."""

    @compiled_kernel(parallel=True, min_elems=0)
    def kernel(a, b, part):
        m_, k_ = a.shape
        n_ = b.shape[1]
        chunks = part.shape[0]
        kt, nb = k_ // TILE, n_ // VEC
        for p in prange(chunks):
            lo, hi = p * m_ // chunks, (p + 1) * m_ // chunks
            part[p] = 0
            for job in range(-(-(hi - lo) // PIXELS_BLOCK) * kt * nb):  # (row block, tile, column block)
                q0 = lo + job // (kt * nb) * PIXELS_BLOCK
                q1 = min(q0 + PIXELS_BLOCK, hi)
                r = job // nb % kt * TILE
                col = job % nb * VEC
                acc = block.zeros(part, TILE, VEC)
                for q in range(q0, q1):
                    acc = block.outer_fma(acc, a, q * k_ + r, 1, b, q * n_ + col)
                block.add_to(acc, part, (p * k_ + r) * n_ + col, n_)

    return kernel
