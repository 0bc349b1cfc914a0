"""Progress reports from an instance to its agent: at most one line per WRITE_EVERY_S, the latest
one written late by a thread, so that a blocked instance still tells what it was doing."""

import os
import select
import subprocess
import sys

from poprun_py import env as envc
from poprun_py.progress import WRITE_EVERY_S

CHILD = """
import sys
from poprun_py.progress import report_progress
for what in ("step 1", "in allreduce #1", "done allreduce #1", "step 2"):
    report_progress(what)
sys.stdin.read()  # blocked, as in a collective: only the writer thread can still report
"""


def _line(fd: int, timeout: float = 30.0) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    assert ready, "no progress line arrived"
    out = b""
    while not out.endswith(b"\n"):
        out += os.read(fd, 1)
    return out


def test_reports_are_coalesced_and_the_latest_arrives_while_the_instance_is_blocked():
    r, w = os.pipe()
    env = {**os.environ, envc.PROGRESS_FD: str(w)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, env=env, pass_fds=(w,),
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    os.close(w)
    try:
        assert _line(r) == b"step 1\n"  # the first goes at once
        assert _line(r) == b"step 2\n"  # the three after it came within WRITE_EVERY_S: only the latest
        assert child.poll() is None  # written by the thread while the main thread is blocked
        assert not select.select([r], [], [], 3 * WRITE_EVERY_S)[0]  # nothing more: nothing new happened
    finally:
        child.communicate(b"", timeout=30)
        os.close(r)
    assert child.returncode == 0
