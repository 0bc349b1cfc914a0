"""Jobs on real hosts (``netns_cluster.py``), watched line by line, and what a job may leave behind.

Shared by the real-host tests (``real_hosts.py``) and the host-level chaos benchmark
(``bench/chaos_hosts.py``), so it needs no pytest: :class:`BackgroundJob` runs a launcher command
and time-stamps each line of its stderr; :func:`leftovers` lists what a finished job left on any
host (a process, a file in the host's own ``/dev/shm``) or in its run directory (a half-written
checkpoint); :func:`program_on` finds the training program on one host (to resume it after a
``signal=STOP`` fault) and :func:`fill` fills a file system.
"""

from __future__ import annotations

import errno
import queue
import subprocess
import threading
import time
from pathlib import Path

import psutil

from tests.poprun_py.netns_cluster import NetnsCluster


class BackgroundJob:
    """A command started in the background whose stderr lines are kept, each with its wall-clock time."""

    def __init__(self, argv: list[str], *, cwd: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.err: list[str] = []
        self.timed: list[tuple[float, str]] = []  # (time.time() when read, line)
        self._out: list[str] = []
        self._readers = [threading.Thread(target=self._read_err, daemon=True),
                         threading.Thread(target=lambda: self._out.extend(self.proc.stdout), daemon=True)]
        for t in self._readers:
            t.start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            self.timed.append((time.time(), line))
            self.lines.put(line)
        self.lines.put(None)

    def wait_for_line(self, text: str, timeout: float = 120.0) -> tuple[float, str]:
        """Block until a stderr line contains ``text``: when it was read (monotonic), and the line."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {timeout:g} s:\n{''.join(self.err[-40:])}")
            if line is None:
                raise AssertionError(f"the job ended before a line with {text!r}:\n{''.join(self.err[-40:])}")
            if text in line:
                return time.monotonic(), line

    def finish(self, timeout: float = 300.0) -> int:
        """Its exit code; raises ``subprocess.TimeoutExpired`` if it runs longer than ``timeout``."""
        code = self.proc.wait(timeout=timeout)
        for t in self._readers:
            t.join(timeout=10.0)
        return code

    def kill(self) -> None:
        """SIGKILL to the launcher (its mpiexec dies with it) and wait for its streams to close."""
        self.proc.kill()
        self.finish(timeout=30.0)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    @property
    def out(self) -> str:
        return "".join(self._out)

    def first_line_after(self, when: float, text: str) -> float | None:
        """The wall-clock time of the first stderr line read after ``when`` that contains ``text``."""
        return next((t for t, line in list(self.timed) if t >= when and text in line), None)


def leftovers(cluster: NetnsCluster, run_dir: Path | None = None, *, wait: float = 10.0,
              hosts: list[int] | None = None) -> list[str]:
    """What a finished job left: a process on a host (each gets ``wait`` seconds to end), a file in a
    host's own /dev/shm, a half-written checkpoint in ``run_dir``; empty when nothing."""
    found = []
    deadline = time.monotonic() + wait
    for k in range(cluster.count) if hosts is None else hosts:
        _, alive = psutil.wait_procs(cluster.job_processes(k), timeout=max(0.1, deadline - time.monotonic()))
        for p in alive:
            try:
                found.append(f"process on host {cluster.names[k]}: pid {p.pid} {' '.join(p.cmdline())[:160]}")
            except psutil.NoSuchProcess:
                pass
        found += [f"/dev/shm of host {cluster.names[k]}: {name}" for name in cluster.shm_files(k)]
    if run_dir is not None and (run_dir / "checkpoints").is_dir():
        found += [f"half-written checkpoint {p}" for p in (run_dir / "checkpoints").glob("*.tmp")]
    return found


def program_on(cluster: NetnsCluster, k: int) -> psutil.Process:
    """The training program of the job on host k (not its agent)."""
    found = [p for p in cluster.job_processes(k) if "launch.train" in " ".join(p.cmdline())
             and "poprun_py.agent" not in " ".join(p.cmdline())]
    if len(found) != 1:
        raise AssertionError(f"expected one training program on host {cluster.names[k]}, found {found}")
    return found[0]


def fill(folder: Path) -> Path:
    """Take every free block of ``folder``'s file system (a file ``filler`` there, returned)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
    return filler
