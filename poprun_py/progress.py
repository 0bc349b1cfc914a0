"""Progress reports from inside an instance, for ``--hang-timeout`` and injected faults.

Under the launcher, the agent passes a pipe as ``POPRUN_PROGRESS_FD``. A report is one short
line, written without blocking: if the agent is slow to read, reports are dropped rather than
slowing training down. Every report is also kept in-process (``last_progress``), which the
in-MPI watchdog reads (``poprun_py/watchdog.py``), and checked against an injected fault
(``POPRUN_FAULT``, ``poprun_py/faults.py``). Outside a launcher and without a fault this costs
one clock read.
"""

from __future__ import annotations

import os
import time

from poprun_py import env as envc
from poprun_py.faults import Fault, fire

_fd: int | None = None
_fault: Fault | None = None
_checked = False
_last: tuple[float, str] = (time.monotonic(), "started")


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


def report_progress(what: str) -> None:
    """Tell the launcher this instance is alive and what it is doing (``"step 12"``)."""
    global _last
    if not _checked:
        _setup()
    _last = (time.monotonic(), what)
    if _fd is not None:
        try:
            os.write(_fd, (what.replace("\n", " ")[:200] + "\n").encode())
        except (BlockingIOError, BrokenPipeError, OSError):
            pass
    if _fault is not None and what == _fault.at:
        fire(_fault)


def last_progress() -> tuple[float, str]:
    """(monotonic time, text) of this process's latest report."""
    return _last
