"""Reading MNIST-format IDX files (plain or gzip), as shipped by MNIST and Fashion-MNIST.

An IDX file is a big-endian header (two zero bytes, a type code, the rank, then one uint32 per
dimension) followed by the raw array. Only unsigned-byte data (type 0x08) is used by image sets.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

_UBYTE = 0x08


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The uint8 array stored in an IDX file; gzip is detected from the content, not the name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: IDX file not found")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"{path}: corrupted gzip stream ({err})") from err
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (the first two bytes must be zero)")
    kind, rank = raw[2], raw[3]
    if kind != _UBYTE:
        raise ValueError(f"{path}: IDX type 0x{kind:02x} is not supported, only unsigned bytes (0x08)")
    header = 4 + 4 * rank
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=rank, offset=4))
    expected = int(np.prod(shape)) if shape else 1
    if len(raw) - header != expected:
        raise ValueError(f"{path}: IDX header promises shape {shape} ({expected} bytes) "
                         f"but {len(raw) - header} bytes follow; the file is truncated or corrupted")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)
