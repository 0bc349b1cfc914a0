"""The in-MPI watchdog: a rank that stops making progress aborts the whole job through MPI."""

import os
import subprocess
import sys

import pytest

from poprun_py.watchdog import deadline, hang_message, start_watchdog, unread_bytes, wait_until_read
from tests.poprun_py.launcher_helpers import ROOT, assert_no_leftovers, launcher_env, write_script


def test_a_rank_waiting_in_a_collective_gives_the_culprit_a_head_start():
    assert deadline(10.0, "step 4") == 10.0
    assert deadline(10.0, "in allreduce #3 (8 bytes)") == 11.0
    assert deadline(100.0, "in barrier #1 (0 bytes)") == 110.0
    assert deadline(2.0, "done barrier #1 (0 bytes)") == 2.0


def test_the_message_names_the_rank_and_what_it_last_did():
    waiting = hang_message(0, 4, "node7", 12.3, 10, "in allreduce #5 (400 bytes)")
    assert waiting.startswith(f"poprun_py: rank 0 of 4 (host node7, pid {os.getpid()}) made no progress for 10 s")
    assert "waiting in allreduce #5 (400 bytes) for 12.3 s: another rank has not reached this collective" in waiting
    stuck = hang_message(3, 4, "node8", 10.5, 10, "step 17")
    assert "last reported 'step 17' 10.5 s ago, not in a collective: this rank itself is stuck" in stuck
    assert stuck.endswith("aborting the job through MPI_Abort (exit code 124)")


def test_the_watchdog_aborts_with_exit_code_124_once_the_deadline_passes(capsys):
    codes = []
    now = [100.0]
    thread = start_watchdog(0.2, 1, 2, "h", abort=codes.append, clock=lambda: now[0],
                            progress=lambda: (99.9, "in barrier #2 (0 bytes)"))
    now[0] = 101.3  # 1.4 s without progress: past 0.2 s + the 1 s head start
    thread.join(timeout=30)
    assert not thread.is_alive() and codes == [124]
    assert "rank 1 of 2 (host h" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--hang-timeout must be > 0"):
        start_watchdog(0, 0, 1, "h")


def test_the_abort_waits_until_the_launcher_has_read_the_message():
    """The message must reach the MPI launcher's proxy before MPI_Abort makes it kill the ranks."""
    r, w = os.pipe()
    try:
        os.write(w, b"rank 0 made no progress\n")
        assert unread_bytes(w) == 24
        assert not wait_until_read(w, limit_s=0.05)  # nobody reads: gives up after the limit
        assert os.read(r, 100) == b"rank 0 made no progress\n"
        assert unread_bytes(w) == 0 and wait_until_read(w, limit_s=0.05)
    finally:
        os.close(r)
        os.close(w)


def test_a_file_or_terminal_never_delays_the_abort(tmp_path):
    with open(tmp_path / "err.txt", "wb") as f:
        f.write(b"x" * 100)
        f.flush()
        assert unread_bytes(f.fileno()) == 0 and wait_until_read(f.fileno(), limit_s=0.05)


STALL = """
import os, signal, sys
import numpy as np, poprun_py as popdist
popdist.init(); comm = popdist.get_comm()
comm.allreduce(np.ones(2))
if comm.rank == 1:
    if sys.argv[1] == "sleep":
        signal.pause()              # alive but stuck outside any collective
    os.kill(os.getpid(), signal.SIGSTOP)  # frozen: cannot even report
comm.allreduce(np.ones(2))          # rank 0 waits here for rank 1
"""


@pytest.mark.parametrize("how", ["sleep", "stop"])
def test_a_stalled_rank_aborts_the_job_under_mpiexec(tmp_path, how):
    script = write_script(tmp_path / "stall.py", STALL)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "poprun_py", "--hang-timeout", "3", script, how],
                         capture_output=True, text=True, timeout=120, env=launcher_env(), cwd=ROOT)
    assert res.returncode == 124, res.stderr  # MPI_Abort's code, passed on by mpiexec
    if how == "sleep":  # the culprit reports itself first
        assert "rank 1 of 2 (host" in res.stderr
        assert "last reported 'done allreduce #1 (16 bytes)'" in res.stderr and "this rank itself is stuck" in res.stderr
    else:  # the frozen rank cannot; the rank waiting for it names the collective
        assert "rank 0 of 2 (host" in res.stderr
        assert "waiting in allreduce #2 (16 bytes)" in res.stderr
    assert "MPI_Abort" in res.stderr
    assert_no_leftovers(str(tmp_path))
