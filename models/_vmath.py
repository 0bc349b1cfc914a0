"""A vectorisable exp for numba kernels (numba has no SIMD exp without Intel SVML).

``exp(x)`` is Cephes' double-precision ``exp`` (Pade approximant after reducing by ln 2,
relative error ~1e-16 on [-708, 709]) written branch-free: rounding by the 1.5*2**52 trick and
``2**n`` built by bit casts, so LLVM can vectorise loops that call it. Inputs are computed in float64 even for
float32 tensors: the result is then exactly rounded to float32 in practice.
"""

from __future__ import annotations

import math

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from models._jit import ENABLED, jit

_LOG2E = 1.4426950408889634
_ROUND = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer held in the low bits
_C1 = 6.93145751953125e-1
_C2 = 1.42860682030941723212e-6
_P0, _P1, _P2 = 1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1
_Q0, _Q1, _Q2, _Q3 = 3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1, 2.0


@intrinsic
def _f64_to_bits(typingctx, x):
    """Reinterpret a float64 as an int64."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def _bits_to_f64(typingctx, bits):
    """Reinterpret an int64 as a float64 (an LLVM bitcast, which vectorises)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


if ENABLED:
    @jit()
    def exp(x):
        x = min(max(float(x), -708.0), 709.0)
        t = _LOG2E * x + _ROUND
        px = t - _ROUND  # round(x / ln 2), as a float
        n = _f64_to_bits(t) - _f64_to_bits(_ROUND)
        r = x - px * _C1 - px * _C2
        rr = r * r
        p = r * ((_P0 * rr + _P1) * rr + _P2)
        q = ((_Q0 * rr + _Q1) * rr + _Q2) * rr + _Q3
        y = 1.0 + 2.0 * (p / (q - p))
        return y * _bits_to_f64((n + 1023) << 52)
else:  # plain Python: the library exp
    def exp(x):
        return math.exp(min(max(float(x), -708.0), 709.0))
