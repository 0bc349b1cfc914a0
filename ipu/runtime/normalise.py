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

from data._jit import jit


@jit
def _apply_lut(pixels, lut, out):
    channels = lut.shape[1]
    for p in range(pixels.shape[0]):
        for c in range(channels):
            out[p, c] = lut[pixels[p, c], c]


@functools.lru_cache(maxsize=32)
def _lut(mean: tuple[float, ...], std: tuple[float, ...], dtype: str) -> np.ndarray:
    """The 256 x C table for one (mean, std, dtype), built once (a run asks for the same one every
    micro-batch); read-only."""
    lut = ((np.arange(256, dtype=np.float64)[:, None] - np.array(mean)) / np.array(std)).astype(dtype)
    lut.flags.writeable = False
    return lut


def normalise(images: np.ndarray, mean, std, out: np.ndarray | None = None, dtype=np.float32) -> np.ndarray:
    """``(images - mean) / std`` per channel (last axis) for uint8 ``images`` of any leading shape.

    Writes into ``out`` when given (same shape, contiguous); returns the float array.
    """
    if images.dtype != np.uint8:
        raise TypeError(f"normalise expects uint8 images, got {images.dtype}; normalise once, on the device")
    mean = np.atleast_1d(np.asarray(mean, np.float64))
    std = np.atleast_1d(np.asarray(std, np.float64))
    channels = images.shape[-1] if images.ndim else 0
    if mean.shape != (channels,) or std.shape != (channels,):
        raise ValueError(f"mean {mean.shape} and std {std.shape} must have one value per channel ({channels})")
    if np.any(std <= 0):
        raise ValueError(f"std must be positive, got {std}")
    if out is None:
        out = np.empty(images.shape, dtype=dtype)
    elif out.shape != images.shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous array of shape {images.shape}, got {out.shape}")
    lut = _lut(tuple(mean.tolist()), tuple(std.tolist()), out.dtype.str)
    pixels = np.ascontiguousarray(images).reshape(-1, channels)
    _apply_lut(pixels, lut, out.reshape(-1, channels))
    return out
