"""Progress reports from inside an instance, for ``--hang-timeout`` and injected faults.

Under the launcher, the agent passes a pipe as ``POPRUN_PROGRESS_FD``. A report is one short
line, written without blocking: if the agent is slow to read, reports are dropped rather than
slowing training down. At most one line goes out per ``WRITE_EVERY_S``; a report that comes
sooner waits, and a thread of this process writes the latest one at the end of that interval,
so a process stuck in a collective or a loop still tells what it was doing, at most
``WRITE_EVERY_S`` late. (A training update reports three times: every report written at once
woke the agent, which runs on the instance's CPU, 90 times a second, and made each gradient
all-reduce of the default job 0.1 ms slower.) Every report is also kept in-process
(``last_progress``), which the in-MPI watchdog reads (``poprun_py/watchdog.py``), and checked against an injected fault
(``POPRUN_FAULT``, ``poprun_py/faults.py``). Outside a launcher and without a fault this costs
one clock read.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

from poprun_py import env as envc

TYPE_CHECKING = False  # typing's flag: the agent, which reads MPI_READY here, starts without faults
if TYPE_CHECKING:
    from poprun_py.faults import Fault

WRITE_EVERY_S = 0.1
# Reported, and written at once, right after MPI_Init: the agent reads the maps of its tree then,
# while the MPI shared-memory file it must remove after an abnormal end is new (poprun_py/shm.py).
MPI_READY = "MPI initialised"

_fd: int | None = None
_fault: Fault | None = None
_checked = False
_last: tuple[float, str] = (time.monotonic(), "started")
_written = 0.0  # monotonic time of the last line written
_pending = False  # a report not written yet: the writer thread's


def _setup() -> None:
    global _fd, _fault, _checked
    _checked = True
    raw = os.environ.get(envc.PROGRESS_FD, "")
    if raw.isdigit():
        try:
            os.set_blocking(int(raw), False)
            _fd = int(raw)
        except OSError:
            _fd = None
    _fault = envc.read_fault(os.environ)
    if _fd is not None:
        threading.Thread(target=_write_late, name="poprun-progress", daemon=True).start()
        atexit.register(_write_pending)


def _write(what: str) -> None:
    global _written
    _written = time.monotonic()
    try:
        os.write(_fd, (what.replace("\n", " ")[:200] + "\n").encode())
    except (BlockingIOError, BrokenPipeError, OSError):
        pass


def _write_pending() -> None:
    global _pending
    if _pending:
        _pending = False  # before reading _last: a later report sets it again
        _write(_last[1])


def _write_late() -> None:
    while True:
        time.sleep(WRITE_EVERY_S)
        _write_pending()


def report_progress(what: str) -> None:
    """Tell the launcher this instance is alive and what it is doing (``"step 12"``)."""
    global _last, _pending
    if not _checked:
        _setup()
    now = time.monotonic()
    _last = (now, what)
    if _fd is not None:
        if now - _written >= WRITE_EVERY_S:
            _pending = False
            _write(what)
        else:
            _pending = True  # _write_late writes it, or a later report replaces it
    if _fault is not None and what == _fault.at:
        from poprun_py.faults import fire

        fire(_fault)


def report_now(what: str) -> None:
    """``report_progress``, written at once whatever the interval (for the few reports the agent
    acts on, e.g. ``MPI_READY``)."""
    global _pending
    report_progress(what)
    if _fd is not None and _pending:
        _pending = False
        _write(what)


def last_progress() -> tuple[float, str]:
    """(monotonic time, text) of this process's latest report."""
    return _last
