"""The run directory's lock: one run at a time in a folder, held for the run's life.

Instance 0 takes ``<run_dir>/.run.lock`` (an exclusive POSIX lock, ``fcntl.lockf``, which NFS
shares between hosts) before it decides to start or continue a run in the folder, and keeps it
until its process ends; the kernel releases it then, also after a crash or SIGKILL, so a lock is
never stale. The file holds the run id of its holder (once its run is decided), for the message
another start prints; a start that is refused writes nothing.

The check that the folder holds no run and the first write into it happen under the lock, so of
two jobs started together into one folder exactly one takes it; the other is refused (it finds the
lock held, or, when the first has ended, the first's files).

A process holds each folder's lock once: asking again for a folder it holds already succeeds (one
process trains one run; a test may decide twice).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".run.lock"

_held: dict[str, int] = {}  # resolved folder -> the open descriptor holding its lock


class RunDirLocked(Exception):
    """Another process holds the folder's lock; ``holder`` is its run id ("" when not yet written)."""

    def __init__(self, folder: Path, holder: str) -> None:
        super().__init__(f"{folder} is locked by run {holder or '(starting)'}")
        self.folder, self.holder = folder, holder


def acquire(folder: str | os.PathLike) -> None:
    """Take ``folder``'s lock for this process (creating the folder); raise :class:`RunDirLocked`
    when another process holds it. Nothing is written: :func:`record` names the run once it is decided."""
    path = Path(folder)
    key = str(path.resolve())
    if key in _held:
        return
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
        os.close(fd)  # this process held no lock on the file: closing it releases nothing
        raise RunDirLocked(path, holder) from None
    _held[key] = fd


def record(folder: str | os.PathLike, run_id: str) -> None:
    """Write the run that holds ``folder``'s lock into the lock file (for another start's message)."""
    fd = _held[str(Path(folder).resolve())]
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{run_id}\n".encode(), 0)


def holds(folder: str | os.PathLike) -> bool:
    """True when this process holds ``folder``'s lock."""
    return str(Path(folder).resolve()) in _held


def release(folder: str | os.PathLike) -> None:
    """Give ``folder``'s lock back (the run's end does so by ending the process)."""
    fd = _held.pop(str(Path(folder).resolve()), None)
    if fd is not None:
        os.close(fd)


__all__ = ["LOCK_FILE", "RunDirLocked", "acquire", "holds", "record", "release"]
