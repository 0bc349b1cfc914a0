"""Waiting for the test cluster without polling: a condition is checked again only when something it
depends on has happened.

``Events`` wakes on two kinds of kernel notification:
- a file written, created or renamed in a watched folder (inotify; a folder's watch covers its files);
- a watched process exiting (a pidfd becomes readable; the process need not be our child).

Slurm itself announces nothing to a client, but both daemons write their log on each state change
the tests wait for, after making it (the cluster logs at ``debug``; ``slurm_cluster`` says which
line marks which change). Our own queries (``squeue``, ``sinfo``, ``scontrol show``) are logged only
at ``debug2``, so checking a condition never wakes the wait that checks it.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

from inotify_simple import INotify, flags

CHANGED = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE | flags.ATTRIB


class Events:
    """Watched folders and processes; ``wait(ready, ...)`` returns once ``ready()`` holds."""

    def __init__(self) -> None:
        self._inotify = INotify()
        self._poll = select.poll()
        self._poll.register(self._inotify.fileno(), select.POLLIN)
        self._folders: set[Path] = set()
        self._pidfds: dict[int, int] = {}  # fd -> pid

    def folder(self, path: str | os.PathLike) -> "Events":
        """Wake when a file in ``path`` (not below) changes; watching a folder twice is a no-op."""
        path = Path(path).resolve()
        if path not in self._folders:
            self._inotify.add_watch(path, CHANGED)
            self._folders.add(path)
        return self

    def process(self, pid: int) -> bool:
        """Wake when process ``pid`` exits; False if it has exited already."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return False
        self._pidfds[fd] = pid
        self._poll.register(fd, select.POLLIN)
        return True

    @property
    def processes(self) -> int:
        """How many of the watched processes have not been seen to exit."""
        return len(self._pidfds)

    def wait(self, ready, timeout: float, what: str, failed=lambda: None) -> None:
        """Until ``ready()`` holds, checking it again on each event. ``failed()`` is checked with it
        and returns the reason to give up at once (a daemon has died), or None. Raises
        ``TimeoutError`` naming ``what`` when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            reason = failed()
            if reason:
                raise RuntimeError(f"waiting for {what}: {reason}")
            if ready():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what} did not happen within {timeout} s")
            for fd, _ in self._poll.poll(left * 1000):
                if fd == self._inotify.fileno():
                    self._inotify.read(timeout=0)  # drain: each change wakes us once
                elif fd in self._pidfds:  # exited: its pidfd stays readable, so stop watching it
                    self._poll.unregister(fd)
                    os.close(fd)
                    del self._pidfds[fd]

    def close(self) -> None:
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds.clear()
        self._inotify.close()

    def __enter__(self) -> "Events":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_for_exits(pids: list[int], timeout: float, what: str) -> None:
    """Until every process in ``pids`` has exited (they need not be our children)."""
    with Events() as events:
        for pid in pids:
            events.process(pid)
        events.wait(lambda: events.processes == 0, timeout, what)
