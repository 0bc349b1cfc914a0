"""The run directory: which run it belongs to, and whether this run may write into it.

A run directory holds one run. Its identity is recorded at the start in ``<run_dir>/identity.json``
and inside every checkpoint: a run id, the resolved configuration and the model's parameter
signature (name, shape and dtype of every weight). What a resumed run may change is listed in
:data:`MAY_CHANGE_ON_RESUME` (the run's length, logging, checkpoint cadence, the IPU fit and
prediction settings); every other key must match.

``run.run_dir`` may hold placeholders in its last folder name: ``{n}`` (the next free number, from
1) and ``{time}`` (the start time, ``YYYYmmdd-HHMMSS``). The named configurations use
``runs/<name>/{n}``, so a fresh run never meets another run's files. The rules:

* A fresh run takes a new folder for a template, or the given folder when it holds no run; a folder
  holding another run's files refuses the run with one line naming both and the choices.
* ``--resume auto`` continues the run in the folder (for a template: the most recently started
  one; after a ``poprun_py --max-restarts`` restart, the one that this launcher job started), from
  its newest checkpoint of that run, after checking that the configuration and the model match.
* ``--resume PATH`` continues from that checkpoint, checked the same way.

Whatever its form, the folder is claimed atomically: instance 0 takes its lock
(``launch.train.run_lock``) before it looks, and holds it for the run's life, so of two jobs
started together into one folder exactly one runs and the other is refused with the message above
(a folder in use by a run still going says so, and to wait for it to end before ``--resume auto``).

:func:`prepare` decides on instance 0 and tells every instance (a collective), so that all of them
write to the same folder and fail together.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from launch.train import checkpoint as ckpt
from launch.train import run_lock
from launch.train.checkpoint import param_signature

logger = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"
RUN_FILES = ("identity.json", "metrics.jsonl", "summary.json")  # besides checkpoints: a run was here
# Keys a resumed run may change: how long it runs, how it logs and checkpoints, and what only the
# memory fit and the POD prediction read. Everything else decides the numbers it computes.
MAY_CHANGE_ON_RESUME = frozenset({
    "run.epochs", "run.max_steps", "run.run_dir", "run.checkpoint_every", "run.keep_checkpoints",
    "run.checksum_every", "run.evaluate", "run.plots", "run.progress_bar", "run.tensorboard",
    "run.tensorboard_every", "run.evaluate_test", "run.update_stats_every",
    "data.cache", "data.eval_micro_batch", "ipu.prefetch_micro_batches", "ipu.device_iterations", "ipu.check_fit",
    "ipu.system", "ipu.num_hosts", "ipu.chip", "ipu.available_memory_proportion", "ipu.num_io_tiles",
})
PLACEHOLDERS = ("{n}", "{time}")
TIME_FORMAT = "%Y%m%d-%H%M%S"


class RunDirError(ValueError):
    """This run may not use the run directory (another run's files, or a mismatched resume)."""


@dataclass(frozen=True)
class Decision:
    """Where this run writes and what it starts from, the same on every instance."""

    run_dir: str
    run_id: str
    checkpoint: str | None  # the file to resume from, or None for a fresh start
    fresh_dir: bool  # no run was in the folder before (write identity.json)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


# -- identity ------------------------------------------------------------------------------------

def flat_config(config: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"section.key": value}`` from a nested config dict, values as JSON would give them back."""
    return {f"{section}.{key}": json.loads(json.dumps(value)) for section, values in config.items()
            for key, value in values.items()}


def config_differences(recorded: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """The keys, outside :data:`MAY_CHANGE_ON_RESUME`, whose values differ: ``key: old -> new``.
    A key that only one side knows (a field added or removed since) is not a difference."""
    old, new = flat_config(recorded), flat_config(current)
    return [f"{key}: {old[key]!r} -> {new[key]!r}" for key in sorted(old.keys() & new.keys())
            if key not in MAY_CHANGE_ON_RESUME and old[key] != new[key]]


def array_signature(arrays: dict[str, np.ndarray], prefix: str = "model") -> list[list[Any]]:
    """The same signature for the weights a checkpoint holds (``model/<name>``), sorted by name."""
    start = prefix + "/"
    return sorted([k[len(start):], list(v.shape), str(v.dtype)] for k, v in arrays.items() if k.startswith(start))


def signature_differences(recorded: list[list[Any]], current: list[list[Any]]) -> list[str]:
    """Weights missing on one side or of another shape (dtype aside: a 16.16 checkpoint restores
    into float32 arrays), at most five, as ``name: recorded -> current``."""
    old = {name: tuple(shape) for name, shape, _ in recorded}
    new = {name: tuple(shape) for name, shape, _ in current}
    out = [f"{name}: {old.get(name, 'absent')} -> {new.get(name, 'absent')}"
           for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]
    return out[:5] + ([f"... {len(out) - 5} more"] if len(out) > 5 else [])


def read_identity(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(run_dir) / IDENTITY_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise RunDirError(f"{path} cannot be read ({err}): it records which run the folder holds; "
                          "restore it or choose a new run.run_dir") from None


def write_identity(run_dir: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write ``identity.json`` atomically (temporary file, then rename)."""
    path = Path(run_dir) / IDENTITY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def holds_run(run_dir: str | os.PathLike) -> bool:
    """True when a run has left files in the folder (its identity, metrics, summary or checkpoints)."""
    folder = Path(run_dir)
    return any((folder / name).exists() for name in RUN_FILES) or bool(ckpt.list_checkpoints(ckpt.checkpoint_dir(folder)))


def new_run_id(now: float | None = None) -> str:
    return time.strftime(TIME_FORMAT, time.localtime(now)) + "-" + secrets.token_hex(3)


# -- templates ---------------------------------------------------------------------------------

def is_template(run_dir: str) -> bool:
    return any(p in run_dir for p in PLACEHOLDERS)


def _split_template(template: str) -> tuple[Path, str]:
    parent, name = os.path.split(template.rstrip("/"))
    if is_template(parent) or not is_template(name):
        raise RunDirError(f"run.run_dir={template!r}: put {{n}} or {{time}} in the last folder name only, "
                          "for example runs/default/{n}")
    return Path(parent or "."), name


def _pattern(name: str) -> re.Pattern:
    text = re.escape(name).replace(re.escape("{n}"), r"(?P<n>\d+)").replace(re.escape("{time}"), r"\d{8}-\d{6}")
    return re.compile(f"^{text}$")


def template_matches(template: str) -> list[Path]:
    """The existing folders that ``template`` names, oldest first (by their number, then name)."""
    parent, name = _split_template(template)
    if not parent.is_dir():
        return []
    pattern = _pattern(name)
    found = [(m, p) for p in parent.iterdir() if p.is_dir() and (m := pattern.match(p.name))]
    return [p for m, p in sorted(found, key=lambda mp: (int(mp[0].group("n")) if "n" in mp[0].groupdict() else 0,
                                                         mp[1].name))]


def claim_new(template: str, now: float | None = None) -> Path:
    """Create and return a new folder for ``template`` (``{n}``: one more than the largest in use;
    an exclusive mkdir, so two jobs starting together get different numbers)."""
    parent, name = _split_template(template)
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime(TIME_FORMAT, time.localtime(now))
    pattern = _pattern(name)
    taken = [int(m.group("n")) for p in parent.iterdir() if (m := pattern.match(p.name)) and "n" in m.groupdict()]
    n = max(taken, default=0) + 1
    for _ in range(1000):
        path = parent / name.replace("{n}", str(n)).replace("{time}", stamp)
        try:
            path.mkdir()
            return path
        except FileExistsError:
            if "{n}" not in name:
                raise RunDirError(f"run.run_dir={template!r}: {path} exists already (two runs started in the same "
                                  "second); add {n} to the name, for example runs/default/{time}-{n}") from None
            n += 1
    raise RunDirError(f"run.run_dir={template!r}: no free folder name after {n}")


def _newest_run(template: str, launcher_run_id: str | None) -> Path | None:
    """The folder of ``template`` to continue: the one this launcher job started when
    ``launcher_run_id`` is given (a restart), else the most recently started run."""
    runs = [(read_identity(p) or {}, p) for p in template_matches(template) if holds_run(p)]
    if launcher_run_id:
        own = [p for record, p in runs if record.get("launcher_run_id") == launcher_run_id]
        return own[-1] if own else None
    if not runs:
        return None
    return max(runs, key=lambda rp: (rp[0].get("started", 0.0), rp[1].name))[1]


# -- the decision ------------------------------------------------------------------------------

def decide(config: dict[str, dict[str, Any]], how: str, *, launcher_run_id: str = "", restart: bool = False,
           now: float | None = None) -> Decision:
    """Where a run with ``config`` (its ``run.run_dir`` as given) writes, and what it resumes.

    ``how``: ``none`` (a fresh run), ``auto`` (continue the run in the folder, if any) or a
    checkpoint's path. ``restart``: this is a restart by ``poprun_py --max-restarts`` of the
    launcher job ``launcher_run_id``. Raises :class:`RunDirError` with the fix; creates the folder
    of a template (``{n}``, ``{time}``)."""
    decision = _decide(config, how, launcher_run_id, restart, now)
    run_lock.record(decision.run_dir, decision.run_id)  # the folder's lock names the run that holds it
    return decision


def _decide(config: dict, how: str, launcher_run_id: str, restart: bool, now: float | None) -> Decision:
    given = config["run"]["run_dir"]
    if how == "none":
        return _fresh(given, now)
    if how == "auto":
        folder = _newest_run(given, launcher_run_id if restart else None) if is_template(given) else Path(given)
        if folder is None or not holds_run(folder):
            return _fresh(given, now)
        return _continue(folder, config, launcher_run_id if restart else "")
    return _from_checkpoint(Path(how), config, given, now)


def _fresh(given: str, now: float | None) -> Decision:
    run_id = new_run_id(now)
    if is_template(given):
        folder = claim_new(given, now)
        _lock(folder)
        return Decision(str(folder), run_id, None, True)
    if holds_run(given):  # the common refusal: nothing taken, nothing written
        raise RunDirError(_in_use(Path(given)))
    _lock(Path(given))
    if holds_run(given):  # another start took the folder, wrote into it and ended between the two looks
        run_lock.release(given)
        raise RunDirError(_in_use(Path(given)))
    return Decision(given, run_id, None, True)


def _lock(folder: Path) -> None:
    """Take ``folder``'s lock for this run's life, or refuse: another run is using it now."""
    try:
        run_lock.acquire(folder)
    except run_lock.RunDirLocked as err:
        raise RunDirError(_in_use(folder, running=err.holder or "starting now")) from None


def _in_use(folder: Path, running: str = "") -> str:
    """The one line refusing a run: ``running`` names a run that holds the folder's lock now."""
    if running:
        return (f"run.run_dir {folder} is in use by run {running}, running now: this run would mix its files with "
                f"it. Choose a new --set run.run_dir=..., number the runs: --set 'run.run_dir={folder}/{{n}}', or "
                "continue that run with --resume auto once it has ended")
    identity = read_identity(folder) or {}
    latest = ckpt.find_latest(folder)
    what = f"run {identity['run_id']}" if identity.get("run_id") else "another run's files"
    where = f", newest checkpoint {latest.name}" if latest else ""
    return (f"run.run_dir {folder} holds {what}{where}: this run would mix its files with them. Continue that run "
            f"with --resume auto, choose a new --set run.run_dir=..., or number the runs: "
            f"--set 'run.run_dir={folder}/{{n}}'")


def _continue(folder: Path, config: dict, restart_of: str) -> Decision:
    """Resume the run in ``folder`` from its newest checkpoint of that run, if the config matches."""
    _lock(folder)
    for partial in ckpt.remove_partial(folder):
        logger.info("Removed %s: a checkpoint left half-written when an earlier attempt was stopped.", partial)
    identity = read_identity(folder)
    if identity is not None:
        _check_config(identity.get("config", {}), config, folder / IDENTITY_FILE)
        if restart_of and identity.get("launcher_run_id") != restart_of:
            raise RunDirError(f"{folder} holds run {identity.get('run_id')}, which this launcher job did not start; "
                              "its first attempt failed before it began a run there (see that attempt's error)")
        run_id = identity["run_id"]
        latest = ckpt.find_latest(folder, run_id=run_id)
    else:  # a folder written before identity.json existed: its newest checkpoint speaks for it
        latest = ckpt.find_latest(folder)
        run_id = new_run_id()
    if latest is not None:
        meta = ckpt.read_meta(latest)
        _check_config(meta.get("config", {}), config, latest)
        run_id = meta.get("run_id") or run_id
    return Decision(str(folder), run_id, str(latest) if latest else None, False)


def _from_checkpoint(path: Path, config: dict, given: str, now: float | None) -> Decision:
    meta = ckpt.read_meta(path)
    _check_config(meta.get("config", {}), config, path)
    run_id = meta.get("run_id") or new_run_id(now)
    own = path.resolve().parent.parent  # <run_dir>/checkpoints/ckpt-...h5
    if is_template(given):
        parent, name = _split_template(given)
        if own.parent == parent.resolve() and _pattern(name).match(own.name):
            _lock(own)
            return Decision(str(own), run_id, str(path), False)
        folder = claim_new(given, now)
        _lock(folder)
        return Decision(str(folder), run_id, str(path), True)
    _lock(Path(given))
    identity = read_identity(given)
    if identity is not None:
        foreign = identity.get("run_id") != run_id
    else:
        foreign = holds_run(given) and Path(given).resolve() != own
    if foreign:
        raise RunDirError(_in_use(Path(given)) + f" (resuming {path} writes into run.run_dir)")
    return Decision(given, run_id, str(path), identity is None)


def _check_config(recorded: dict, current: dict, source: Path) -> None:
    diffs = config_differences(recorded, current)
    if diffs:
        raise RunDirError(f"{source} belongs to a run with another configuration ({'; '.join(diffs)}): resuming "
                          "would continue it with different numbers. Run with the recorded values, or start a new "
                          "run (without --resume, or with a new run.run_dir)")


def check_weights(path: str | os.PathLike, arrays: dict[str, np.ndarray], params) -> None:
    """Refuse a checkpoint whose weights do not fit the model, naming the file and the weights."""
    diffs = signature_differences(array_signature(arrays), param_signature(params))
    if diffs:
        raise RunDirError(f"checkpoint {path} holds weights of another model ({'; '.join(diffs)}): resume it with "
                          "the model it was written with, or start a new run")


# -- every instance ----------------------------------------------------------------------------

def prepare(config: dict, comm, *, lead: bool, how: str, launcher_run_id: str = "", restart: bool = False) -> Decision:
    """:func:`decide` on instance 0, the same answer (or the same error) on every instance. Collective."""
    text = ""
    if lead:
        try:
            text = decide(config, how, launcher_run_id=launcher_run_id, restart=restart).to_json()
        except ValueError as err:  # RunDirError, or a checkpoint that cannot be read
            text = json.dumps({"error": str(err)})
    raw = json.loads(broadcast_text(comm, text))
    if "error" in raw:
        raise RunDirError(raw["error"])
    return Decision(**raw)


def broadcast_text(comm, text: str, root: int = 0) -> str:
    """``text`` of instance ``root`` on every instance (its length, then its UTF-8 bytes). Collective."""
    data = np.frombuffer(text.encode(), np.uint8)
    size = np.array([data.size], np.int64)
    comm.broadcast(size, root=root)
    buf = np.zeros(int(size[0]), np.uint8)
    buf[: data.size] = data[: buf.size]
    comm.broadcast(buf, root=root)
    return buf.tobytes().decode()


def record_identity(decision: Decision, config: dict, params, *, launcher_run_id: str = "",
                    command: list[str] | None = None, now: float | None = None) -> Path:
    """Write (a fresh run) or update (a resumed one) ``identity.json``; instance 0 only."""
    now = time.time() if now is None else now
    record = read_identity(decision.run_dir) or {}
    if not record:
        record = {"run_id": decision.run_id, "started": now, "config": config,
                  "params": param_signature(params), "command": command or [], "resumes": []}
        if decision.checkpoint:
            record["resumed_from"] = decision.checkpoint
    else:
        record.setdefault("resumes", []).append({"time": now, "checkpoint": decision.checkpoint,
                                                 "launcher_run_id": launcher_run_id, "command": command or []})
        record["config"] = config  # what may change on resume (epochs, logging) is the latest
    record["launcher_run_id"] = launcher_run_id
    return write_identity(decision.run_dir, record)
