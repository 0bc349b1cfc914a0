"""Training checkpoints in HDF5: written atomically by instance 0, read back by every instance.

A checkpoint is ``<run_dir>/checkpoints/ckpt-<step:08d>.h5`` holding

* one dataset per array, under its key (``model/...``, ``optim/momentum/...``, ``ema/...``,
  ``replica/<r>/...``; slashes become HDF5 groups), and
* a JSON attribute ``meta`` with every scalar (step, epoch, loader position, seed, loss scale,
  optimizer and EMA counters), the full configuration, the run id and the parameter signature
  (``launch.train.run_dir``: what a resume is checked against).

No pickle anywhere. Writing goes to ``ckpt-....h5.tmp`` in the same folder, is flushed and
fsynced, then ``os.replace``d over the final name (atomic on POSIX), and the folder is fsynced:
a crash at any point leaves either the old set of checkpoints or the new one, never a torn file
(a crash before the rename leaves the ``.tmp``, never read, which the run that continues in the
folder removes: :func:`remove_partial`).
The newest ``keep`` checkpoints of the run (``meta["run_id"]``) are kept; files of any other run
are left alone (``launch.train.run_dir`` keeps one run to a folder).

What a run's checkpoint holds (:func:`capture_state`) and how it is put back
(:func:`restore_state`) is defined here too, next to the file format.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from poprun_py.progress import report_progress

if TYPE_CHECKING:
    from launch.train.build import Training

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
    _prune(final.parent, keep, meta.get("run_id"))
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


def _prune(folder: Path, keep: int, run_id: str | None) -> None:
    """Delete all but the newest ``keep`` checkpoints of run ``run_id`` (another run's are not ours)."""
    for old in _of_run(list_checkpoints(folder), run_id)[:-keep]:
        old.unlink(missing_ok=True)


def _of_run(paths: list[Path], run_id: str | None) -> list[Path]:
    """The checkpoints among ``paths`` that run ``run_id`` wrote (None: every one)."""
    if run_id is None:
        return paths
    out = []
    for path in paths:
        try:
            if read_meta(path).get("run_id") == run_id:
                out.append(path)
        except ValueError:  # unreadable: not provably ours, so never deleted or resumed
            continue
    return out


def remove_partial(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the half-written checkpoints (``ckpt-<step>.h5.tmp``) in ``run_dir``, which a run stopped
    while it wrote one left (SIGKILL, its host lost); the paths removed. Call holding the folder's lock."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    partial = sorted(p for p in folder.iterdir() if p.name.endswith(".tmp") and _NAME.match(p.name[:-4]))
    for path in partial:
        path.unlink(missing_ok=True)
    return partial


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


def find_latest(run_dir: str | os.PathLike, run_id: str | None = None) -> Path | None:
    """The newest complete checkpoint in ``run_dir`` (of run ``run_id`` when given), or None."""
    found = _of_run(list_checkpoints(checkpoint_dir(run_dir)), run_id)
    return found[-1] if found else None


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's ``meta`` alone (its configuration, run id, step), without the arrays."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist; pass --resume auto or an existing file")
    try:
        with h5py.File(path, "r") as f:
            if "meta" not in f.attrs:
                raise ValueError(f"{path} has no 'meta' attribute: it was not written by launch.train.checkpoint")
            return json.loads(f.attrs["meta"])
    except OSError as err:
        raise ValueError(f"checkpoint {path} cannot be read ({err}); delete it to resume from an older one") from None


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, meta)`` as saved; raises ValueError naming the file if it is not a checkpoint."""
    path = Path(path)
    meta = read_meta(path)
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"checkpoint {path} has format version {meta.get('format_version')}, "
                         f"this code reads version {FORMAT_VERSION}")
    arrays: dict[str, np.ndarray] = {}

    def visit(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            arrays[name] = obj[()]

    try:
        with h5py.File(path, "r") as f:
            f.visititems(visit)
    except OSError as err:
        raise ValueError(f"checkpoint {path} cannot be read ({err}); delete it to resume from an older one") from None
    return arrays, meta


def param_signature(params) -> list[list[Any]]:
    """``[name, shape, dtype]`` of every parameter, in the model's order (recorded in each checkpoint)."""
    return [[p.name, list(p.data.shape), str(p.data.dtype)] for p in params]


def split_prefix(arrays: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The entries under ``prefix/``, with the prefix removed."""
    start = prefix.rstrip("/") + "/"
    return {k[len(start):]: v for k, v in arrays.items() if k.startswith(start)}


def capture_state(t: Training, extra: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Everything needed to continue exactly. Collective (gathers replica states): call everywhere."""
    e = t.engine
    arrays: dict[str, np.ndarray] = {f"model/{p.name}": p.data for p in e.params}
    meta: dict[str, Any] = {"config": t.cfg.to_dict(), "run_id": t.run_id, "params": param_signature(e.params),
                            "engine_step": e.step, "loader": t.loader.state(),
                            "loss_scaler": e.scaler.state_dict(), "seed": t.cfg.run.seed,
                            "rng": "stateless: every stream is a function of (seed, step, replica, micro-batch)",
                            "total_replicas": e.total_replicas, **extra}
    for key, value in e.optimizer.state_dict().items():
        if isinstance(value, np.ndarray):
            arrays[f"optim/{key}"] = value
        else:
            meta.setdefault("optim_scalars", {})[key] = value
    if e.ema is not None:
        for key, value in e.ema.state_dict().items():
            if isinstance(value, np.ndarray):
                arrays[f"ema/{key}"] = value
            else:
                meta.setdefault("ema_scalars", {})[key] = value
    states = e.gather_replica_states()
    for r, state in enumerate(states or []):
        for key, value in state.items():
            arrays[f"replica/{r}/{key}"] = value
    return arrays, meta


def restore_state(t: Training, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Load a checkpoint written by :func:`capture_state` (any instance split of the same replicas)."""
    e = t.engine
    if meta["total_replicas"] != e.total_replicas:
        raise ValueError(f"the checkpoint was written with {meta['total_replicas']} replicas, this run has "
                         f"{e.total_replicas}: the per-replica state and the global batch would not match")
    weights = split_prefix(arrays, "model")
    names = {p.name for p in e.params}
    if set(weights) != names:
        raise ValueError(f"checkpoint weights {sorted(set(weights) ^ names)[:5]} do not match the model")
    for p in e.params:
        np.copyto(p.data, weights[p.name])
    e.optimizer.load_state_dict({**split_prefix(arrays, "optim"), **meta.get("optim_scalars", {})})
    if e.ema is not None:
        e.ema.load_state_dict({**split_prefix(arrays, "ema"), **meta.get("ema_scalars", {})})
    e.scaler.load_state_dict(meta["loss_scaler"])
    for replica in e.replicas:
        state = split_prefix(arrays, f"replica/{replica.index}")
        if state:
            replica.load_state_dict(state)
    e.step = int(meta["engine_step"])
    t.cpu_before = float(meta.get("cpu_s", 0.0))  # the run's CPU seconds up to this checkpoint
    t.loader.load_state(meta["loader"])
    if e.emulation is not None:  # 16.16 keeps its weights as float16 values (a checkpoint of another precision too)
        e.emulation.store_initial()
