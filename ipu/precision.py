"""Precision modes (32.32, 16.32, 16.16) and stochastic rounding to float16.

Graphcore's CNN configs name precision ``compute.weights``: ``16.32`` computes in float16 and
keeps float32 master weights; ``16.16`` keeps everything in float16, so the weight update itself
is rounded to float16, stochastically when stochastic rounding is on (the default for the G16
recipe, docs/sources.md §1.2). The emulator computes in float32 on the CPU; these helpers apply the
storage rounding a real IPU would apply, and ``ipu/runtime/emulation.py`` applies them in training runs
(``ipu.emulate_precision``). Loss scaling (static 128 or dynamic) lives with the
optimizers in ``models/optim/loss_scaling.py``; ``LOSS_SCALE`` below is the recipe's static value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jit import ENABLED, float32_bits, float32_from_bits, jit
from jit.hashing import hash3, splitmix64

FP16_MAX = 65504.0
LOSS_SCALE = 128.0  # docs/sources.md §1.2: Graphcore CNN default --loss-scaling 128 (static)
FP16_MIN_NORMAL_EXP = -14  # smallest normal float16 is 2**-14
FP16_MANTISSA_BITS = 10


@dataclass(frozen=True)
class PrecisionMode:
    """Storage widths (bytes) of one precision mode."""

    name: str
    activation_bytes: int  # activations, partials and stashes
    weight_bytes: int  # the weights the optimizer updates
    optimizer_bytes: int  # optimizer state (momentum) per parameter element
    accumulator_bytes: int  # gradient accumulation buffers
    stochastic_update: bool  # the weight update is stored to float16 with stochastic rounding

    @property
    def half_compute(self) -> bool:
        return self.activation_bytes == 2


PRECISIONS: dict[str, PrecisionMode] = {
    "32.32": PrecisionMode("32.32", 4, 4, 4, 4, stochastic_update=False),
    "16.32": PrecisionMode("16.32", 2, 4, 4, 4, stochastic_update=False),
    "16.16": PrecisionMode("16.16", 2, 2, 2, 2, stochastic_update=True),
}


def get_precision(name: str) -> PrecisionMode:
    if name not in PRECISIONS:
        raise ValueError(
            f"unknown precision {name!r}: choose one of {', '.join(PRECISIONS)} (for example --precision 16.16)"
        )
    return PRECISIONS[name]


@jit
def _sr_kernel(x: np.ndarray, seed: np.uint64, out: np.ndarray, out_bits: np.ndarray) -> None:
    """Round each float32 of ``x`` (flat, given as its uint32 bits) to a float16-representable
    value, stochastically, into float32 ``out`` (flat; ``out_bits`` is its uint32 view; it may
    alias ``x``).

    For |x| between neighbours lo and lo + ulp, round up with probability (|x| - lo) / ulp, so
    the expected result equals x. The draw of element i is splitmix64(seed + i): the same seed
    gives the same rounding whatever the array is split into. In the float16 normal range the 13
    mantissa bits float16 drops are exactly (|x| - lo) / ulp in units of 2**-13, so adding 13
    random bits and truncating rounds up with exactly that probability; below it (subnormals,
    spacing 2**-24) 53 random bits decide against the float32 fraction (exact).
    """
    for i in range(x.size):
        b = x[i]
        exp = (b >> np.uint32(23)) & np.uint32(0xFF)
        sign = b & np.uint32(0x80000000)
        m = b & np.uint32(0x7FFFFFFF)
        if exp == np.uint32(0xFF) or m == np.uint32(0):  # inf, nan, zeros
            out_bits[i] = b
            continue
        draw = splitmix64(seed + np.uint64(i))
        if exp >= np.uint32(127 + FP16_MIN_NORMAL_EXP):
            m = (m + np.uint32(draw >> np.uint64(51))) & np.uint32(0xFFFFE000)
            out_bits[i] = sign | (m if m <= np.uint32(0x477FE000) else np.uint32(0x7F800000))  # 65504, else inf
        else:  # |x| * 2**24 = full * 2**(exp - 126), below 2**10: floor and fraction exact in float64
            full = (m & np.uint32(0x7FFFFF)) | (np.uint32(0x800000) if exp else np.uint32(0))
            y = math.ldexp(np.float64(full), int(max(exp, np.uint32(1))) - 126)
            lo = math.floor(y)
            u = np.float64(draw >> np.uint64(11)) * (1.0 / 9007199254740992.0)  # 53 bits -> [0, 1)
            r = math.ldexp(lo + 1.0 if u < y - lo else lo, -24)
            out[i] = -r if sign else r


_EXPONENT = np.uint32(0x7F800000)
_RN_LOW = np.uint32((127 + FP16_MIN_NORMAL_EXP) << 23)  # 2**-14: below, float16's spacing stays 2**-24
_RN_HIGH = np.uint32((127 + 16) << 23)  # 2**16: from 65520 up everything rounds to inf
_RN_SHIFT = np.uint32((23 - FP16_MANTISSA_BITS) << 23)  # times 2**13
_FP16_MAX32, _INF32 = np.float32(FP16_MAX), np.float32(np.inf)


@jit
def _rn_kernel(x: np.ndarray) -> None:
    """Round each float32 of ``x`` (flat) in place to its nearest float16 value, ties to even, as an
    IPU (and numpy) float32 -> float16 cast: subnormals kept, values from 65520 up become inf, nan
    stays nan (a signalling nan comes back quiet, as from a hardware cast).

    Float32's own rounding does it: with 2**E the power of two at or below |x| (at least 2**-14,
    float16's smallest normal, below which its spacing stays 2**-24), |x| + 2**(E + 13) lies where
    float32's spacing is 2**(E - 10), float16's spacing at |x|, so the addition rounds |x| to float16
    precision (to nearest, ties to even) and subtracting 2**(E + 13) back is exact. No branch and
    no second view of ``x``: LLVM vectorises the loop (about 6x scalar bit
    arithmetic; all 2**32 float32 patterns checked against numpy's cast: ``bench/bench_rounding.py
    --exhaustive``).
    """
    for i in range(x.size):
        v = x[i]
        magic = float32_from_bits(min(max(float32_bits(v) & _EXPONENT, _RN_LOW), _RN_HIGH) + _RN_SHIFT)
        r = (np.abs(v) + magic) - magic
        x[i] = np.copysign(_INF32 if r > _FP16_MAX32 else r, v)


def round_to_fp16_(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded in place to the nearest float16 values (kept as float32), returned."""
    if x.dtype != np.float32:
        raise ValueError(f"round_to_fp16_ rounds float32 arrays in place, got {x.dtype}; "
                         "build the model in float32 (the default)")
    if x.flags.c_contiguous:
        _rn_kernel(x.reshape(-1))
    else:
        with np.errstate(over="ignore"):  # overflow to inf is the IPU's behaviour too
            x[...] = x.astype(np.float16)
    return x


def stochastic_round_to_fp16(
    x: np.ndarray, rng_or_seed: np.random.Generator | int, out: np.ndarray | None = None
) -> np.ndarray:
    """``x`` stochastically rounded to float16, written into ``out`` (float16, same shape).

    Each value becomes one of its two neighbouring float16 values, the nearer one more likely,
    in proportion to proximity: the rounding is unbiased. ``rng_or_seed`` is a numpy Generator
    (one 63-bit draw is taken from it) or an int seed.
    """
    if isinstance(rng_or_seed, np.random.Generator):
        seed = int(rng_or_seed.integers(0, 2**63))
    else:
        seed = int(rng_or_seed) % 2**64
    if out is None:
        out = np.empty(x.shape, dtype=np.float16)
    if out.dtype != np.float16 or out.shape != x.shape:
        raise ValueError(f"out must be float16 with shape {x.shape}, got {out.dtype} {out.shape}")
    exact = np.empty(x.size, dtype=np.float32)  # every value is float16-representable
    src = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    _sr_kernel(src.view(np.uint32), np.uint64(seed), exact, exact.view(np.uint32))
    out[...] = exact.reshape(x.shape)
    return out


def stochastic_round_to_fp16_(x: np.ndarray, seed: int) -> np.ndarray:
    """Contiguous float32 ``x`` stochastically rounded in place to float16 values (kept as float32),
    returned: how a ``16.16`` IPU stores a weight update. Element ``i`` draws ``splitmix64(seed + i)``."""
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ValueError(f"stochastic_round_to_fp16_ rounds contiguous float32 arrays in place, got {x.dtype} "
                         f"(contiguous={x.flags.c_contiguous})")
    flat = x.reshape(-1)
    bits = flat.view(np.uint32)
    _sr_kernel(bits, np.uint64(int(seed) % 2**64), flat, bits)
    return x


@jit
def _rn_all(floats) -> None:
    """:func:`_rn_kernel` over a typed list of flat float32 arrays: one call."""
    for k in range(len(floats)):
        _rn_kernel(floats[k])


@jit
def _sr_all(floats, bits, seed, update) -> None:
    """:func:`_sr_kernel` over typed lists, array ``k`` with ``hash3(seed, update, k)`` (as
    ``jit.hashing.hash3(seed, update, parameter index)`` gives it): one call."""
    for k in range(len(floats)):
        _sr_kernel(bits[k], hash3(seed, update, k), floats[k], bits[k])


class Float16Batch:
    """One kernel call rounds a whole list of contiguous float32 arrays in place (the weights, the
    optimizer state): per array, a numba call costs microseconds of dispatch, and a model has a
    hundred tensors or more. The typed lists are built once and rebuilt when the list holds other
    arrays (a parameter whose ``data`` was replaced); the arrays are held, so an id stays theirs."""

    def __init__(self) -> None:
        self._key: tuple[int, ...] | None = None
        self._held: list[np.ndarray] = []
        self._lists = None

    def _bind(self, arrays: list[np.ndarray]):
        key = tuple(map(id, arrays))
        if key != self._key:
            if not ENABLED or not all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays) or not arrays:
                self._lists = None
            else:
                from numba import typed

                flats = [a.reshape(-1) for a in arrays]
                self._lists = (typed.List(flats), typed.List([f.view(np.uint32) for f in flats]))
            self._key, self._held = key, list(arrays)
        return self._lists

    def round_(self, arrays: list[np.ndarray]) -> None:
        """Every array to its nearest float16 values (:func:`round_to_fp16_` on each)."""
        lists = self._bind(arrays)
        if lists is None:
            for a in arrays:
                round_to_fp16_(a)
        else:
            _rn_all(lists[0])

    def stochastic_round_(self, arrays: list[np.ndarray], seed: int, update: int) -> None:
        """Array ``k`` stochastically, seeded ``hash3(seed, update, k)`` (:func:`stochastic_round_to_fp16_`)."""
        lists = self._bind(arrays)
        if lists is None:
            for k, a in enumerate(arrays):
                stochastic_round_to_fp16_(a, int(hash3(int(seed), int(update), k)))
        else:
            _sr_all(*lists, np.int64(seed), np.int64(update))

