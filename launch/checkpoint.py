"""Training checkpoints in HDF5: written atomically by instance 0, read back by every instance.

A checkpoint is ``<run_dir>/checkpoints/ckpt-<step:08d>.h5`` holding

* one dataset per array, under its key (``model/...``, ``optim/momentum/...``, ``ema/...``,
  ``replica/<r>/...``; slashes become HDF5 groups), and
* a JSON attribute ``meta`` with every scalar (step, epoch, loader position, seed, loss scale,
  optimizer and EMA counters) and the full configuration.

No pickle anywhere. Writing goes to ``ckpt-....h5.tmp`` in the same folder, is flushed and
fsynced, then ``os.replace``d over the final name (atomic on POSIX), and the folder is fsynced:
a crash at any point leaves either the old set of checkpoints or the new one, never a torn file.
The newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from poprun_py.progress import report_progress

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^ckpt-(\d{8})\.h5$")
FORMAT_VERSION = 1


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoint_path(run_dir: str | os.PathLike, step: int) -> Path:
    return checkpoint_dir(run_dir) / f"ckpt-{step:08d}.h5"


def save_checkpoint(run_dir: str | os.PathLike, step: int, arrays: dict[str, np.ndarray], meta: dict[str, Any],
                    keep: int = 2) -> Path:
    """Write a checkpoint for weight update ``step`` atomically; prune to the newest ``keep``."""
    final = checkpoint_path(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(final.name + ".tmp")
    try:
        report_progress(f"checkpoint {step}: writing")  # a slow write is not a hang; a fault can strike here
        _write(tmp, arrays, {**meta, "format_version": FORMAT_VERSION, "step": int(step)})
        report_progress(f"checkpoint {step}: renaming")
        _before_rename(tmp)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(final.parent)
    _prune(final.parent, keep)
    logger.info("Checkpoint for update %d written to %s.", step, final)
    return final


def _write(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=np.asarray(value))
        f.attrs["meta"] = json.dumps(meta, sort_keys=True)
        f.flush()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _before_rename(tmp: Path) -> None:
    """Called between the temporary file being complete and its rename (a seam for crash tests)."""


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def _prune(folder: Path, keep: int) -> None:
    for old in list_checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """Complete checkpoints in ``folder``, oldest first (temporary files are ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name))


def step_of(path: str | os.PathLike) -> int:
    """The weight update a checkpoint file name says it holds."""
    match = _NAME.match(Path(path).name)
    if not match:
        raise ValueError(f"{path} is not named like a checkpoint (ckpt-<8 digits>.h5)")
    return int(match.group(1))


def find_latest(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    found = list_checkpoints(checkpoint_dir(run_dir))
    return found[-1] if found else None


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` as saved; raises ValueError naming the file if it is not a checkpoint."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist; pass --resume auto or an existing file")
    arrays: dict[str, np.ndarray] = {}
    try:
        with h5py.File(path, "r") as f:
            if "meta" not in f.attrs:
                raise ValueError(f"{path} has no 'meta' attribute: it was not written by launch.checkpoint")
            meta = json.loads(f.attrs["meta"])

            def visit(name: str, obj) -> None:
                if isinstance(obj, h5py.Dataset):
                    arrays[name] = obj[()]

            f.visititems(visit)
    except OSError as err:
        raise ValueError(f"checkpoint {path} cannot be read ({err}); delete it to resume from an older one") from None
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"checkpoint {path} has format version {meta.get('format_version')}, "
                         f"this code reads version {FORMAT_VERSION}")
    return arrays, meta


def split_prefix(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The entries under ``prefix/``, with the prefix removed."""
    start = prefix.rstrip("/") + "/"
    return {k[len(start):]: v for k, v in arrays.items() if k.startswith(start)}
