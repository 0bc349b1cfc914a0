"""Register blocks: a ``rows x cols`` tile of accumulators that is an LLVM value, never memory.

A hand-written matrix kernel keeps a tile of partial sums in vector registers and adds one outer
product per step along the reduction. Written as a small numpy array (``acc[t, v] += x * w``),
that tile is memory to LLVM: a heap array it cannot promote, and on CPUs with gather and scatter
(AVX-512) its loop vectoriser turns the tile's loops into gathers and scatters on that memory,
many times slower on Intel cores than the register block meant. What LLVM makes of such a loop
depends on the CPU it compiles for, so a kernel tuned on one CPU can be slow on another.

:class:`Block` makes the tile a value instead: ``rows`` LLVM vectors of ``cols`` lanes, a
first-class aggregate that numba keeps in one variable and LLVM splits into SSA registers. The
operations below are its only interface, each one unrolled over the rows at compile time:

- :func:`zeros` ``(like, rows, cols)``: a block of zeros of ``like``'s dtype (an array);
- :func:`outer_fma` ``(acc, xs, x_off, x_step, ws, w_off)``: for every row t,
  ``acc[t] = fma(xs[x_off + t*x_step], ws[w_off : w_off + cols], acc[t])``: one broadcast per row,
  one vector load of ``cols`` values, one fused multiply-add per row (one rounding, the same bits
  on every CPU with FMA);
- :func:`load` ``(acc, ys, off, step)``: a block like ``acc`` read from ``ys[off + t*step :+ cols]``;
- :func:`store` ``(acc, ys, off, step, rows)``: the first ``rows`` rows written there;
- :func:`add_to` ``(acc, ys, off, step)``: every row added to what is there.

Offsets are in elements from the array's first element (its data pointer), whatever its shape
and strides: the kernels compute them from the strides, so a block reads any view, overlapping
ones included. Nothing is bounds-checked (as in numba's own indexing). The lanes are an LLVM
vector of ``cols`` floats, which the code generator maps onto the CPU's registers: 16 float32
lanes are one zmm register where 512-bit vectors are enabled, two ymm registers on AVX2 or under
LLVM's 256-bit preference, four xmm registers on SSE. ``tests/models/test_kernel_targets.py``
checks the generated code of every kernel for a list of CPUs.

Under ``POPRUN_JIT=0`` the same names are plain-Python functions over a ``[rows, cols]`` numpy
array, so the kernels stay steppable in a debugger.
"""

from __future__ import annotations

import numpy as np

from jit import ENABLED


def _py_flat(ys: np.ndarray) -> np.ndarray:
    """The elements from ``ys``'s data pointer on, as a flat writable view (the plain-Python path)."""
    base = ys
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    start = (ys.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // ys.itemsize
    return base.reshape(-1)[start:] if base.flags.c_contiguous else np.lib.stride_tricks.as_strided(
        ys, (base.size - start,), (ys.itemsize,))


if not ENABLED:
    def zeros(like, rows, cols):
        """A ``rows x cols`` block of zeros of ``like``'s dtype."""
        return np.zeros((rows, cols), like.dtype)

    def outer_fma(acc, xs, x_off, x_step, ws, w_off):
        """acc[t] += xs[x_off + t*x_step] * ws[w_off : w_off + cols] for every row t (fused)."""
        x, w = _py_flat(xs), _py_flat(ws)
        rows, cols = acc.shape
        out = acc.copy()
        wide = acc.dtype == np.float32  # float32: the float64 product is exact, one (rarely two) roundings
        for t in range(rows):
            xv = x[x_off + t * x_step]
            for v in range(cols):
                if wide:
                    out[t, v] = np.float32(np.float64(xv) * np.float64(w[w_off + v]) + np.float64(acc[t, v]))
                else:  # (not fused: plain Python has no fma before 3.13)
                    out[t, v] = xv * w[w_off + v] + acc[t, v]
        return out

    def load(acc, ys, off, step):
        """A block like ``acc`` read from ys[off + t*step : + cols]."""
        y = _py_flat(ys)
        rows, cols = acc.shape
        return np.array([y[off + t * step: off + t * step + cols] for t in range(rows)], acc.dtype)

    def store(acc, ys, off, step, rows):
        """ys[off + t*step : + cols] = acc[t] for the first ``rows`` rows."""
        y = _py_flat(ys)
        for t in range(min(rows, acc.shape[0])):
            y[off + t * step: off + t * step + acc.shape[1]] = acc[t]

    def add_to(acc, ys, off, step):
        """ys[off + t*step : + cols] += acc[t] for every row."""
        y = _py_flat(ys)
        for t in range(acc.shape[0]):
            y[off + t * step: off + t * step + acc.shape[1]] += acc[t]

else:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic, models, register_model

    class Block(types.Type):
        """The numba type of a register block: ``rows`` vectors of ``cols`` lanes of ``dtype``."""

        def __init__(self, dtype, rows: int, cols: int):
            self.dtype, self.rows, self.cols = dtype, rows, cols
            super().__init__(name=f"Block({dtype}, {rows}x{cols})")

    @register_model(Block)
    class _BlockModel(models.PrimitiveModel):
        def __init__(self, dmm, fe_type):
            lane = dmm.lookup(fe_type.dtype).get_value_type()
            super().__init__(dmm, fe_type, ir.ArrayType(ir.VectorType(lane, fe_type.cols), fe_type.rows))

    def _literal(ty) -> int | None:
        return ty.literal_value if isinstance(ty, types.IntegerLiteral) else None

    def _pointer(context, builder, aty, arr, offset):
        """The address of element ``offset`` (from the data pointer) of array ``arr``."""
        data = context.make_array(aty)(context, builder, arr).data
        return builder.gep(data, [offset])

    def _vector_pointer(builder, ptr, vty):
        return builder.bitcast(ptr, vty.as_pointer())

    @intrinsic(prefer_literal=True)
    def zeros(typingctx, like, rows, cols):
        r, c = _literal(rows), _literal(cols)
        if not isinstance(like, types.Array) or r is None or c is None:
            return None
        block = Block(like.dtype, r, c)

        def codegen(context, builder, sig, args):
            return ir.Constant(context.get_value_type(block), None)

        return block(like, rows, cols), codegen

    @intrinsic
    def outer_fma(typingctx, acc, xs, x_off, x_step, ws, w_off):
        if not (isinstance(acc, Block) and isinstance(xs, types.Array) and isinstance(ws, types.Array)
                and xs.dtype == ws.dtype == acc.dtype):
            return None

        def codegen(context, builder, sig, args):
            block, x, xo, xstep, w, wo = args
            intp = context.get_value_type(types.intp)
            xo, xstep, wo = (context.cast(builder, v, t, types.intp) for v, t in
                             zip((xo, xstep, wo), (sig.args[2], sig.args[3], sig.args[5])))
            lane = context.get_value_type(acc.dtype)
            vty = ir.VectorType(lane, acc.cols)
            size = context.get_abi_sizeof(lane)
            wv = builder.load(_vector_pointer(builder, _pointer(context, builder, sig.args[4], w, wo), vty),
                              align=size)
            suffix = f"v{acc.cols}f{8 * size}"
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3), f"llvm.fma.{suffix}")
            splat = ir.Constant(ir.VectorType(ir.IntType(32), acc.cols), None)
            for t in range(acc.rows):
                idx = builder.add(xo, builder.mul(xstep, ir.Constant(intp, t)))
                xv = builder.load(_pointer(context, builder, sig.args[1], x, idx), align=size)
                xb = builder.shuffle_vector(builder.insert_element(ir.Constant(vty, ir.Undefined), xv,
                                                                  ir.Constant(ir.IntType(32), 0)),
                                            ir.Constant(vty, ir.Undefined), splat)
                row = builder.call(fma, [xb, wv, builder.extract_value(block, t)])
                block = builder.insert_value(block, row, t)
            return block

        return acc(acc, xs, x_off, x_step, ws, w_off), codegen

    def _over(acc, ys) -> bool:
        """Whether a block operation on ``acc`` can read or write array ``ys`` (same dtype)."""
        return isinstance(acc, Block) and isinstance(ys, types.Array) and ys.dtype == acc.dtype

    def _rows(context, builder, sig, acc, ys_ty, ys, off, off_ty, step, step_ty):
        """(pointer to row t's first lane, vector type) for each row of a block over ``ys``."""
        intp = context.get_value_type(types.intp)
        off = context.cast(builder, off, off_ty, types.intp)
        step = context.cast(builder, step, step_ty, types.intp)
        vty = ir.VectorType(context.get_value_type(acc.dtype), acc.cols)
        for t in range(acc.rows):
            idx = builder.add(off, builder.mul(step, ir.Constant(intp, t)))
            yield t, _vector_pointer(builder, _pointer(context, builder, ys_ty, ys, idx), vty)

    @intrinsic
    def load(typingctx, acc, ys, off, step):
        if not _over(acc, ys):
            return None

        def codegen(context, builder, sig, args):
            _, y, o, s = args
            size = context.get_abi_sizeof(context.get_value_type(acc.dtype))
            block = ir.Constant(context.get_value_type(acc), None)
            for t, ptr in _rows(context, builder, sig, acc, sig.args[1], y, o, sig.args[2], s, sig.args[3]):
                block = builder.insert_value(block, builder.load(ptr, align=size), t)
            return block

        return acc(acc, ys, off, step), codegen

    @intrinsic
    def store(typingctx, acc, ys, off, step, rows):
        if not (_over(acc, ys) and isinstance(rows, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            block, y, o, s, n = args
            n = context.cast(builder, n, sig.args[4], types.intp)
            intp = context.get_value_type(types.intp)
            size = context.get_abi_sizeof(context.get_value_type(acc.dtype))
            for t, ptr in _rows(context, builder, sig, acc, sig.args[1], y, o, sig.args[2], s, sig.args[3]):
                with cgutils.if_likely(builder, builder.icmp_signed(">", n, ir.Constant(intp, t))):
                    builder.store(builder.extract_value(block, t), ptr, align=size)
            return context.get_dummy_value()

        return types.none(acc, ys, off, step, rows), codegen

    @intrinsic
    def add_to(typingctx, acc, ys, off, step):
        if not _over(acc, ys):
            return None

        def codegen(context, builder, sig, args):
            block, y, o, s = args
            size = context.get_abi_sizeof(context.get_value_type(acc.dtype))
            for t, ptr in _rows(context, builder, sig, acc, sig.args[1], y, o, sig.args[2], s, sig.args[3]):
                builder.store(builder.fadd(builder.load(ptr, align=size), builder.extract_value(block, t)),
                              ptr, align=size)
            return context.get_dummy_value()

        return types.none(acc, ys, off, step), codegen


__all__ = ["add_to", "load", "outer_fma", "store", "zeros"]
