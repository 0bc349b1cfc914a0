"""The house's numba layer: the one switch between compiled and plain-Python kernels, and the
vector width they are compiled for, for every package with kernels (``data/``, ``models/``, ``ipu/``).

Every hot kernel is written once as plain Python over numpy arrays and compiled through :func:`jit`
(nopython, cached on disk, GIL released, no fastmath, numpy's error model). ``POPRUN_JIT=0`` (read
here and nowhere else) runs them all uncompiled (slow, but steppable in a debugger); :data:`prange`
then degrades to ``range``. :mod:`jit.hashing` holds the counter hash the kernels share.

It is a package of its own, below ``data/`` and ``models/``, rather than a module of ``poprun_py/``
(the launcher's package, also in the lowest layer): the loader must stay importable with numpy,
numba and h5py alone, without importing the launcher's package, and the launcher must start
without numpy or numba. It imports none of the project's packages.

``POPRUN_VECTOR_WIDTH`` (read here too: ``auto``, the default, ``256`` or ``512``) picks the vector
width LLVM compiles for. ``auto`` is 512 bits on CPUs with AVX-512F and 256 elsewhere: LLVM's own
tuning for most AVX-512 CPUs (Skylake-SP to Sapphire Rapids) prefers 256-bit vectors, which would
leave the hand kernels' register blocks (:mod:`jit.block`) at half the width of the FMA units that
OpenBLAS's and oneDNN's 512-bit kernels use. ``512`` lifts that preference (numba's target features
plus ``-prefer-256-bit``), ``256`` sets it; it governs the loops LLVM vectorises itself, while the
register blocks, explicit vectors, stay in zmm registers on AVX-512 either way. A different width is another numba target, cached apart.
It changes no result: no kernel lets LLVM reorder a sum. :func:`vector_registers` tells the kernels
the register file they are compiled for, from which they size their register blocks.

``POPRUN_WISDOM`` (read here too) is where the kernels' measured choices between a hand kernel
and BLAS are kept (``models.kernels.wisdom``): unset, ``$XDG_CACHE_HOME/poprun_py/kernel-wisdom.json``
(``~/.cache`` without it); a path; or ``off``, where fixed rules on the shape decide (the tests).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
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
    return numba.config.CPU_FEATURES or _host_features()


@functools.lru_cache(maxsize=1)
def _host_features() -> str:
    """(cached: the kernels size their blocks from it on every product, and LLVM's answer is a
    string of a hundred features built anew on each call, 0.3 ms)"""
    from llvmlite import binding

    return binding.get_host_cpu_features().flatten()


def vector_width() -> str:
    """``POPRUN_VECTOR_WIDTH`` as applied: ``auto`` or the width asked for."""
    return os.environ.get(VECTOR_WIDTH_VARIABLE, "").strip().lower() or "auto"


def _applied_width() -> str:
    """The width ``POPRUN_VECTOR_WIDTH`` stands for on the target CPU (``auto``: 512 with AVX-512F)."""
    if vector_width() != "auto":
        return vector_width()
    return "512" if "+avx512f" in target_features().split(",") else "auto"


if ENABLED and _applied_width() != "auto":  # before anything compiles: numba reads it when its target is built
    numba.config.CPU_FEATURES = _vector_features(_applied_width(), target_features())


@functools.cache
def cpu_model(stepping: bool = False) -> str:
    """This CPU as the records name it: "AMD EPYC (family 25 model 1)" (with ``stepping``: "... model 1
    stepping 1)"), from the first processor of ``/proc/cpuinfo``: a VM's model name alone can stand for
    CPUs of several generations. Elsewhere, what :mod:`platform` knows."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in
                                                      f.read().split("\n\n")[0].splitlines() if ":" in line)}
        step = f" stepping {info['stepping']}" if stepping else ""
        return f"{info['model name']} (family {info['cpu family']} model {info['model']}{step})"
    except (OSError, KeyError):
        return platform.processor() or platform.machine()


def vector_registers() -> tuple[int, int]:
    """(count, float32 lanes) of the vector registers the register blocks (:mod:`jit.block`) are
    compiled into: (32, 16) with AVX-512, (16, 8) with AVX, (16, 4) with SSE. The blocks are
    explicit LLVM vectors, which LLVM keeps in zmm registers whatever the width preference (that
    applies to the loops it vectorises itself; checked in the assembly for skylake-avx512 at 256)."""
    features = target_features().split(",")
    if "+avx512f" in features:
        return 32, 16
    return 16, 8 if "+avx" in features else 4


WISDOM_VARIABLE = "POPRUN_WISDOM"


def wisdom_path() -> Path | None:
    """The file of measured kernel choices (``POPRUN_WISDOM``), None when it is ``off``."""
    env = os.environ
    return _wisdom_path(env.get(WISDOM_VARIABLE, ""), env.get("XDG_CACHE_HOME", ""), env.get("HOME", ""))


@functools.lru_cache(maxsize=16)
def _wisdom_path(value: str, xdg: str, home: str) -> Path | None:
    """(cached: the kernels ask on every product)"""
    value = value.strip()
    if value.lower() in ("off", "0", "false", "no"):
        return None
    if value:
        return Path(value).expanduser()
    return Path(xdg or Path(home or Path.home()) / ".cache") / "poprun_py" / "kernel-wisdom.json"


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


__all__ = ["ENABLED", "VECTOR_WIDTH_VARIABLE", "bitcast", "float32_bits", "float32_from_bits", "is_enabled", "jit",
           "cpu_model", "prange", "target_features", "vector_registers", "vector_width", "wisdom_path", "WISDOM_VARIABLE"]
