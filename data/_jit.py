"""The one switch between numba-compiled and plain-Python kernels, for every package.

Every hot kernel in ``models/``, ``data/`` and ``ipu/`` is written once as plain Python over numpy
arrays and compiled through :func:`jit` (nopython, cached on disk, GIL released, no fastmath,
numpy's error model). ``POPRUN_JIT=0`` (read here and nowhere else) runs them all uncompiled (slow,
but steppable in a debugger); :data:`prange` then degrades to ``range``. It lives in ``data/``, the
lowest package with kernels, because the loader must stay importable with numpy, numba and h5py
alone; ``models/`` and ``ipu/`` compile through it too.

``POPRUN_VECTOR_WIDTH`` (read here too: ``auto``, the default, ``256`` or ``512``) picks the vector
width LLVM compiles the kernels' loops for. On CPUs with AVX-512, LLVM's tuning for most of them
(Skylake-SP to Sapphire Rapids, Zen 4) prefers 256-bit vectors, so by default the kernels use half
the width of the FMA units that OpenBLAS's and oneDNN's 512-bit kernels use; ``512`` lifts that
preference (numba's target features plus ``-prefer-256-bit``; checked in the assembly: zmm
registers), ``256`` sets it. It is a run-time choice, not measured for speed yet (no AVX-512
machine was available): compare with ``bench/bench_models.py --vector-width``. A different width
is another numba target, cached apart. It should change no result, as no kernel lets LLVM reorder
a sum, but that too is untested on an AVX-512 CPU.

:func:`splitmix64` (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA
2014) is the one 64-bit mixer that the data order, the augmentation draws and the stochastic
rounding hash their counters with.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numba
import numpy as np

JIT_VARIABLE = "POPRUN_JIT"
ENABLED = os.environ.get(JIT_VARIABLE, "1").strip().lower() not in ("0", "false", "no")
prange = numba.prange if ENABLED else range
VECTOR_WIDTH_VARIABLE = "POPRUN_VECTOR_WIDTH"


def _vector_features(width: str, features: str) -> str | None:
    """numba's target features for ``POPRUN_VECTOR_WIDTH`` (None: leave numba's as they are), given
    the features it would use (its ``NUMBA_CPU_FEATURES``, or the host's)."""
    width = width.strip().lower()
    if width in ("", "auto"):
        return None
    if width not in ("256", "512"):
        raise ValueError(f"{VECTOR_WIDTH_VARIABLE}={width!r}: use auto (LLVM's choice), 256 or 512")
    if width == "512" and "+avx512f" not in features.split(","):
        raise ValueError(f"{VECTOR_WIDTH_VARIABLE}=512, but the CPU numba compiles for has no AVX-512F "
                         "(numba's target features say -avx512f); unset it or set it to 256")
    return f"{features},{'-' if width == '512' else '+'}prefer-256-bit"


def target_features() -> str:
    """The LLVM target features numba compiles for: ``NUMBA_CPU_FEATURES`` (or what this module set
    from ``POPRUN_VECTOR_WIDTH``), else the host's."""
    from llvmlite import binding

    return numba.config.CPU_FEATURES or binding.get_host_cpu_features().flatten()


def vector_width() -> str:
    """``POPRUN_VECTOR_WIDTH`` as applied: ``auto`` or the width asked for."""
    return os.environ.get(VECTOR_WIDTH_VARIABLE, "").strip().lower() or "auto"


if ENABLED and vector_width() != "auto":  # before anything compiles: numba reads it when its target is built
    numba.config.CPU_FEATURES = _vector_features(vector_width(), target_features())


def is_enabled() -> bool:
    """True when the kernels are compiled with numba."""
    return ENABLED


def jit(fn: Callable | None = None, *, parallel: bool = False, fastmath: frozenset = frozenset()) -> Callable:
    """Compile ``fn`` with numba, or return it unchanged under ``POPRUN_JIT=0``.

    Use bare (``@jit``) or with options (``@jit(parallel=True)``). ``fastmath`` is empty (strict
    IEEE) or a set of LLVM flags such as ``{"contract"}`` (fused multiply-add), for kernels whose
    tests show the flags change nothing that matters.
    """

    def wrap(f: Callable) -> Callable:
        if not ENABLED:
            return f
        return numba.njit(cache=True, parallel=parallel, fastmath=set(fastmath) or False, nogil=True,
                          error_model="numpy")(f)

    return wrap(fn) if fn is not None else wrap


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


@jit
def splitmix64(x: np.uint64) -> np.uint64:
    """One splitmix64 step: a bijective 64-bit mixer of ``x`` (uint64 arithmetic, wrapping)."""
    z = np.uint64(x) + _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def bitcast(src, dst):
    """A numba intrinsic reinterpreting the bits of a ``src`` scalar as a ``dst`` of the same width
    (numba types): an LLVM bitcast, a register move that vectorises. An integer argument of
    another width (numba widens integer arithmetic to 64 bits) is first cast to ``src``."""
    from numba.extending import intrinsic

    @intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(dst))

        return dst(src), codegen

    return cast


if ENABLED:
    from numba import types

    # a loop that reads a float32 array through a uint32 view of it as well cannot be vectorised
    # (LLVM cannot prove the two views apart); these read the bits of the value already loaded
    float32_bits = bitcast(types.float32, types.uint32)
    float32_from_bits = bitcast(types.uint32, types.float32)
else:
    def float32_bits(x) -> np.uint32:
        """The uint32 bit pattern of a float32 (plain-Python twin of the compiled intrinsic)."""
        return np.float32(x).view(np.uint32)

    def float32_from_bits(x) -> np.float32:
        """The float32 whose bit pattern is the low 32 bits of integer ``x``."""
        return np.uint32(int(x) & 0xFFFFFFFF).view(np.float32)


@jit
def hash3(a: int, b: int, c: int) -> np.uint64:
    """A 64-bit hash of three non-negative integers (seed, epoch, sample id; seed, update, parameter)."""
    h = splitmix64(np.uint64(a))
    h = splitmix64(h ^ np.uint64(b))
    return splitmix64(h ^ np.uint64(c))


__all__ = ["ENABLED", "VECTOR_WIDTH_VARIABLE", "bitcast", "float32_bits", "float32_from_bits", "hash3", "is_enabled",
           "jit", "prange", "splitmix64", "target_features", "vector_width"]
