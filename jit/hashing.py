"""The one 64-bit counter hash of the kernels: :func:`splitmix64` (Steele, Lea, Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014), the mixer that the data order, the
augmentation draws and the stochastic rounding hash their counters with, and :func:`hash3` over it.
"""

from __future__ import annotations

import numpy as np

from jit import jit

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


@jit
def hash3(a: int, b: int, c: int) -> np.uint64:
    """A 64-bit hash of three non-negative integers (seed, epoch, sample id; seed, update, parameter)."""
    h = splitmix64(np.uint64(a))
    h = splitmix64(h ^ np.uint64(b))
    return splitmix64(h ^ np.uint64(c))


__all__ = ["hash3", "splitmix64"]
