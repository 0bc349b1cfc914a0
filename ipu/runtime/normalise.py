"""The device side's first operation: uint8 pixels to normalised floats.

On an IPU-POD the host ships 8-bit images and the chip normalises them; the engine calls
:func:`normalise` on each micro-batch before the first layer. It is a per-channel lookup table of
256 entries, ``lut[v, c] = (v - mean[c]) / std[c]``, computed in float64 and cast once, applied by
a numba kernel that releases the GIL. ``mean`` and ``std`` are in pixel units (0..255), as stored in
the dataset file's attributes (``Dataset.info.mean``/``.std``). There is no backward: the input is data.
"""

from __future__ import annotations

import functools

import numpy as np

from jit import jit


@jit
def _apply_lut(pixels, lut, out):
    channels = lut.shape[1]
    for p in range(pixels.shape[0]):
        for c in range(channels):
            out[p, c] = lut[pixels[p, c], c]


@functools.lru_cache(maxsize=32)
def _lut(mean: tuple[float, ...], std: tuple[float, ...], channels: int, dtype: str) -> np.ndarray:
    """The 256 x C table for one (mean, std, dtype), checked and built once (a run asks for the same
    one every micro-batch, and the checks alone took 30 us a call); read-only."""
    if len(mean) != channels or len(std) != channels:
        raise ValueError(f"mean {mean} and std {std} must have one value per channel ({channels})")
    if any(not v > 0 for v in std):
        raise ValueError(f"std must be positive, got {std}")
    values = np.arange(256, dtype=np.float64)[:, None]
    lut = ((values - np.array(mean, np.float64)) / np.array(std, np.float64)).astype(dtype)
    lut.flags.writeable = False
    return lut


def _values(v) -> tuple[float, ...]:
    """Per-channel values as a tuple of floats (the table's cache key)."""
    if type(v) is tuple:
        return v
    return tuple(np.atleast_1d(np.asarray(v, np.float64)).tolist())


def normalise(images: np.ndarray, mean, std, out: np.ndarray | None = None, dtype=np.float32) -> np.ndarray:
    """``(images - mean) / std`` per channel (last axis) for uint8 ``images`` of any leading shape.

    Writes into ``out`` when given (same shape, contiguous); returns the float array.
    """
    if images.dtype != np.uint8:
        raise TypeError(f"normalise expects uint8 images, got {images.dtype}; normalise once, on the device")
    channels = images.shape[-1] if images.ndim else 0
    if out is None:
        out = np.empty(images.shape, dtype=dtype)
    elif out.shape != images.shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous array of shape {images.shape}, got {out.shape}")
    lut = _lut(_values(mean), _values(std), channels, out.dtype.str)
    pixels = np.ascontiguousarray(images).reshape(-1, channels)
    _apply_lut(pixels, lut, out.reshape(-1, channels))
    return out
