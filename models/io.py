"""Save and load state_dicts as ``.npz`` or ``.safetensors`` (never pickle).

Keys and layouts are torchvision's, so a ``.safetensors`` file written from a torchvision
``efficientnet_bN().state_dict()`` (``safetensors.torch.save_file``) loads directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_FORMATS = (".npz", ".safetensors")


def _format(path: Path) -> str:
    if path.suffix not in _FORMATS:
        raise ValueError(f"state_dict file {str(path)!r}: unknown extension {path.suffix!r}; use .npz or .safetensors")
    return path.suffix


def save_state_dict(path: str | Path, state: dict[str, np.ndarray]) -> None:
    """Write ``state`` (name -> array) to ``path``; the extension picks the format."""
    path = Path(path)
    arrays = {k: np.require(v, requirements="C") for k, v in state.items()}
    if _format(path) == ".npz":
        with open(path, "wb") as f:  # np.savez would append .npz to other names
            np.savez(f, **arrays)
        return
    from safetensors.numpy import save_file

    save_file(arrays, str(path))


def load_state_dict_file(path: str | Path) -> dict[str, np.ndarray]:
    """Read a state_dict written by :func:`save_state_dict` (or by torch via safetensors)."""
    path = Path(path)
    fmt = _format(path)
    if not path.is_file():
        raise FileNotFoundError(f"state_dict file {str(path)!r} does not exist")
    if fmt == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    from safetensors.numpy import load_file

    return load_file(str(path))
