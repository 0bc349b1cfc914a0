"""Hang detection for in-MPI mode: ``mpirun -n 16 poprun_py --hang-timeout 300 train.py``.

There is no launcher above the ranks to watch them, so each rank watches itself: a daemon thread
reads the rank's latest progress report (``poprun_py.progress.last_progress``: every collective
reports ``in allreduce #12 (...)`` before it starts and ``done ...`` after, the engine reports
``step N``, programs call ``report_progress``) and, when nothing was reported for the timeout,
prints which rank it is and what it last did, then aborts the whole job through ``MPI_Abort``
(exit code 124), which makes the MPI launcher stop every rank.

A rank waiting inside a collective is usually the victim, not the culprit: it gives the other
ranks a head start (``HEAD_START`` of the timeout) so that the rank that never reached the
collective, if it can still run, reports first and names itself. A rank frozen entirely
(SIGSTOP, a hung kernel call holding the interpreter) cannot report; then the ranks waiting for
it abort the job and name the collective they wait in.

mpi4py releases the interpreter lock while it waits in MPI, and initialises MPI with
``MPI_THREAD_MULTIPLE``, so the thread can run and call ``MPI_Abort`` while the main thread is
blocked in a collective.
"""

from __future__ import annotations

import fcntl
import os
import sys
import termios
import threading
import time
from collections.abc import Callable

from poprun_py.errors import EXIT_HANG
from poprun_py.progress import last_progress
from poprun_py.shm import remove_own_segments

OUTPUT_DRAIN_S = 5.0  # at most this long for the MPI launcher to read the message before MPI_Abort
HEAD_START = 0.1  # extra share of the timeout a rank waiting in a collective gives the others
MIN_HEAD_START_S = 1.0


def deadline(timeout: float, last_what: str) -> float:
    """Seconds without progress after which this rank aborts the job."""
    if last_what.startswith("in "):
        return timeout + max(MIN_HEAD_START_S, HEAD_START * timeout)
    return timeout


def hang_message(rank: int, size: int, host: str, idle: float, timeout: float, last_what: str) -> str:
    """What the aborting rank prints: who it is, what it last did, what that suggests."""
    if last_what.startswith("in "):
        doing = (f"waiting {last_what} for {idle:.1f} s: another rank has not reached this collective "
                 "(its own report, if it could still run, comes first)")
    else:
        doing = f"last reported {last_what!r} {idle:.1f} s ago, not in a collective: this rank itself is stuck"
    return (f"poprun_py: rank {rank} of {size} (host {host}, pid {os.getpid()}) made no progress for "
            f"{timeout:g} s (--hang-timeout); {doing}; aborting the job through MPI_Abort "
            f"(exit code {EXIT_HANG})")


def unread_bytes(fd: int) -> int:
    """Bytes written to ``fd`` that its reader has not taken yet (a pipe's FIONREAD); 0 for a
    terminal, a file or anything that cannot say."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except OSError:
        return 0


def wait_until_read(fd: int, limit_s: float = OUTPUT_DRAIN_S, poll_s: float = 0.01) -> bool:
    """Wait until the reader of the pipe behind ``fd`` has taken what was written (at most ``limit_s``).

    Under mpiexec a rank's stderr is a pipe to the MPI launcher's proxy, which forwards it. When the
    rank calls MPI_Abort right after writing, the proxy may handle the abort, kill the ranks and exit
    before it has read the pipe, and the message that says why the job stopped is lost. True if the
    pipe was drained in time."""
    end = time.monotonic() + limit_s
    while unread_bytes(fd) > 0:
        if time.monotonic() > end:
            return False
        time.sleep(poll_s)
    return True


def abort_job(code: int) -> None:
    """MPI_Abort on COMM_WORLD if the program initialised MPI, else a hard exit (the MPI
    launcher then stops the job because a rank ended without finalising). MPI's shared-memory
    files that this rank maps are removed first: an aborted job never finalises, which is where
    MPI would remove them (poprun_py/shm.py)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        remove_own_segments()
        mpi.COMM_WORLD.Abort(code)
    os._exit(code)


def start_watchdog(timeout: float, rank: int, size: int, host: str, *,
                   abort: Callable[[int], None] = abort_job, clock: Callable[[], float] = time.monotonic,
                   progress: Callable[[], tuple[float, str]] = last_progress) -> threading.Thread:
    """Watch this rank's progress in a daemon thread; abort the job when it stalls for ``timeout`` s."""
    if timeout <= 0:
        raise ValueError(f"--hang-timeout must be > 0 seconds, got {timeout}")
    poll = min(1.0, timeout / 4)

    def watch() -> None:
        while True:
            time.sleep(poll)
            since, what = progress()
            idle = clock() - since
            if idle > deadline(timeout, what):
                sys.stderr.write(hang_message(rank, size, host, idle, timeout, what) + "\n")
                sys.stderr.flush()
                try:
                    wait_until_read(sys.stderr.fileno())
                except (AttributeError, OSError, ValueError):  # stderr replaced by an object with no fd
                    pass
                abort(EXIT_HANG)
                return

    thread = threading.Thread(target=watch, name="poprun_py-watchdog", daemon=True)
    thread.start()
    return thread
