"""Progress reports from inside an instance to its agent, for ``--hang-timeout``.

The agent passes a pipe as ``POPRUN_PROGRESS_FD``. A report is one short line, written without
blocking: if the agent is slow to read, reports are dropped rather than slowing training down.
Outside a launcher this does nothing.
"""

from __future__ import annotations

import os

from poprun_py import env as envc

_fd: int | None = None
_checked = False


def _progress_fd() -> int | None:
    global _fd, _checked
    if not _checked:
        _checked = True
        raw = os.environ.get(envc.PROGRESS_FD, "")
        if raw.isdigit():
            try:
                os.set_blocking(int(raw), False)
                _fd = int(raw)
            except OSError:
                _fd = None
    return _fd


def report_progress(what: str) -> None:
    """Tell the launcher this instance is alive and what it is doing (``"step 12"``)."""
    fd = _progress_fd()
    if fd is None:
        return
    try:
        os.write(fd, (what.replace("\n", " ")[:200] + "\n").encode())
    except (BlockingIOError, BrokenPipeError, OSError):
        pass
