"""No MPI shared-memory file outlives a job that ends abnormally (poprun_py/shm.py).

MPICH keeps ``/dev/shm/mpich_shm_<world id>_<node>`` for a job's lifetime and removes it only in
MPI_Finalize. Every job here prints the segments its processes map right after MPI_Init (its own
``/proc/self/maps``), so each test knows its job's own files by name, whatever other jobs on the
machine create meanwhile, and checks that every one of them is gone once the job has ended:
crash, an error after MPI started, SIGKILL, hang, and Ctrl-C, in launcher mode and in in-MPI mode.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import uuid

import psutil
import pytest

from poprun_py.mpi_command import find_mpiexec
from poprun_py.processes import processes_with_env, start_sweeper, sweep_also
from poprun_py.shm import SCAN_AT_S, SCAN_EVERY_S, SegmentTracker, mapped_segments, remove_segments
from tests.poprun_py.launcher_helpers import ROOT, launcher_env, write_script

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc/self"),
                                reason="needs Linux /dev/shm and /proc")

MARK = "POPRUN_SHM_TEST_JOB"  # in every process of one test's job, to wait for all of them

# After MPI_Init and one collective, print the MPI segments this process maps, then `ACTION`.
PROGRAM = """\
import json, os, signal, sys
import numpy as np
import poprun_py as p
from poprun_py.shm import mapped_segments
p.init()
comm = p.get_comm()
comm.allreduce(np.ones(2))
line = "SEGMENTS " + json.dumps(sorted(mapped_segments(os.getpid()))) + "\\n"
with open(os.environ["POPRUN_SHM_TEST_REPORTS"], "a") as f:  # first here: a job's abort may drop its stdout
    f.write(line)
sys.stdout.write(line)  # one write: one line; a test that reads it finds the file's line written already
sys.stdout.flush()
me = p.getInstanceIndex()
ACTION
"""
ACTIONS = {
    "raise": "if me == 1:\n    raise RuntimeError('instance 1 fails')\ncomm.barrier()",
    "exit": "if me == 1:\n    sys.exit(3)\ncomm.barrier()",
    "kill": "if me == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\ncomm.barrier()",
    # The job runs 1 IPU per replica: a ValueError on every instance. The barrier first: an instance's error
    # ends the job, which may otherwise stop the other before it has printed its segments.
    "usage": "comm.barrier()\np.get_device_id(4)",
    "hang": "if me == 1:\n    while True: signal.pause()\ncomm.barrier()",  # stuck outside the collective
    "wait": "while True: signal.pause()",  # waits until a signal ends it
}


def _program(tmp_path, action: str) -> str:
    return write_script(tmp_path / f"prog_{action}.py", PROGRAM.replace("ACTION", ACTIONS[action]))


def _segments(output: str) -> set[str]:
    found = set()
    for line in output.splitlines():
        if "SEGMENTS " in line:
            found |= set(json.loads(line.split("SEGMENTS ", 1)[1]))
    return found


def _reports_file(token: str) -> str:
    """Where the job's processes append their SEGMENTS lines: MPICH's process manager may drop the last
    output of a job that an instance's error aborts, a file keeps every line written."""
    return os.path.join(tempfile.gettempdir(), f"poprun-shm-test-{token}.txt")


def _reports(token: str) -> str:
    try:
        with open(_reports_file(token)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _job_env(token: str) -> dict[str, str]:
    return launcher_env(**{MARK: token, "POPRUN_SHM_TEST_REPORTS": _reports_file(token)})


def _assert_gone_after(token: str, output: str, instances_reporting: int | None = 2) -> set[str]:
    """Wait for every process of the job (by its token), then check its segments are gone. The segments
    are those the processes reported in the job's file (``output``, the job's stdout, for the messages);
    ``instances_reporting`` None: at least one."""
    reports = _reports(token)
    if reports:
        os.unlink(_reports_file(token))
    reported = [line for line in reports.splitlines() if "SEGMENTS " in line]
    assert len(reported) == instances_reporting if instances_reporting else reported, output
    segments = _segments(reports)
    assert segments and all(os.path.basename(s).startswith("mpich_shm_") for s in segments), output
    gone, alive = psutil.wait_procs(processes_with_env(MARK, token), timeout=20)
    assert not alive, f"processes of the job still running: {alive}"
    left = sorted(s for s in segments if os.path.exists(s))
    assert not left, f"MPI shared-memory files left behind: {left}\n{output}"
    return segments


def _poprun(token: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poprun_py", "--num-instances", "2", *args],
                          capture_output=True, text=True, timeout=timeout, env=_job_env(token), cwd=ROOT)


# -- launcher mode -------------------------------------------------------------------------------
@pytest.mark.parametrize("action,code", [("raise", 1), ("exit", 3), ("kill", 137), ("usage", 1)])
def test_launcher_mode_crash_kill_and_usage_error_leave_no_segment(tmp_path, action, code):
    token = uuid.uuid4().hex
    res = _poprun(token, "python", _program(tmp_path, action))
    assert res.returncode == code, res.stderr
    _assert_gone_after(token, res.stdout)


def test_launcher_mode_unwrapped_python_crash_leaves_no_segment():
    """`python -c` is not run by the bootstrap: the agents' scans alone find the segment. Instance 1
    leaves as a native crash would, without MPI_Finalize (a plain sys.exit would wait in it for
    instance 0, blocked in the barrier)."""
    token = uuid.uuid4().hex
    code = PROGRAM.replace("ACTION", "if me == 1:\n    os._exit(3)\ncomm.barrier()")
    res = _poprun(token, sys.executable, "-c", code)
    assert res.returncode == 3, res.stderr
    _assert_gone_after(token, res.stdout)


def test_launcher_mode_hang_leaves_no_segment(tmp_path):
    token = uuid.uuid4().hex
    # The hang counts from the instance's start: 6 s leaves a loaded machine time to reach the collective.
    res = _poprun(token, "--hang-timeout", "6", "python", _program(tmp_path, "hang"))
    assert res.returncode == 124, res.stderr
    _assert_gone_after(token, res.stdout)


# Right after MPI_Init, before any collective: each instance notes its segments and its agent's working
# folder (under the temporary folder, named after the run), then kills its agent. The agent's scan, due
# at its next tick after the "MPI initialised" report, comes too late: only what the program itself
# handed over before that report is known (chaos: a host lost within a quarter second of MPI_Init).
KILL_AGENT = """\
import json, os, signal, sys
import poprun_py as p
from poprun_py.shm import mapped_segments
p.init()
line = "SEGMENTS " + json.dumps(sorted(mapped_segments(os.getpid()))) + "\\n"
with open(os.environ["POPRUN_SHM_TEST_REPORTS"], "a") as f:
    f.write(line + "RUN " + os.environ["POPRUN_RUN_ID"] + "\\n")
os.kill(os.getppid(), signal.SIGKILL)
while True:
    signal.pause()
"""


def test_agents_killed_right_after_mpi_init_leave_no_segment_and_no_working_folder(tmp_path):
    token = uuid.uuid4().hex
    res = _poprun(token, "python", write_script(tmp_path / "kill_agent.py", KILL_AGENT))
    assert res.returncode != 0, res.stderr
    run_ids = {line.split()[1] for line in _reports(token).splitlines() if line.startswith("RUN ")}
    # The first agent killed ends the job: MPICH may kill the other rank before it has reported (its
    # segment, the node's, is the same file, and its agent's sweeper knows it all the same).
    _assert_gone_after(token, res.stdout, instances_reporting=None)
    assert len(run_ids) == 1, run_ids
    prefix = f"poprun_{run_ids.pop()}_"  # the agents name their working folders after the run
    left = [name for name in os.listdir(tempfile.gettempdir()) if name.startswith(prefix)]
    assert not left, f"agents' working folders left in {tempfile.gettempdir()}: {left}"


def _read_until_segments(proc: subprocess.Popen, count: int) -> str:
    """Block on the job's output until ``count`` instances printed their segments."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if sum("SEGMENTS " in s for s in seen) == count:
            return "".join(seen)
    raise AssertionError("the job ended before every instance reported:\n" + "".join(seen) + proc.stderr.read())


def test_launcher_mode_ctrl_c_leaves_no_segment(tmp_path):
    token = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-m", "poprun_py", "--num-instances", "2", "python",
                             _program(tmp_path, "wait")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_job_env(token), cwd=ROOT)
    head = _read_until_segments(proc, 2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    _assert_gone_after(token, head + out)
    assert "Traceback" not in out + err and "poprun_py: received SIGINT; stopping all instances" in err


# -- in-MPI mode ---------------------------------------------------------------------------------
def _mpiexec_argv(*args: str) -> list[str]:
    return [find_mpiexec(None), "-n", "2", sys.executable, "-m", "poprun_py", *args]


@pytest.mark.parametrize("action", ["raise", "kill", "usage"])
def test_in_mpi_mode_crash_kill_and_usage_error_leave_no_segment(tmp_path, action):
    token = uuid.uuid4().hex
    res = subprocess.run(_mpiexec_argv(_program(tmp_path, action)), capture_output=True, text=True,
                         timeout=120, env=_job_env(token), cwd=ROOT)
    assert res.returncode != 0, res.stderr
    reporting = 2 if action != "kill" else _reports(token).count("SEGMENTS ")  # a SIGKILL may come before rank 0's
    _assert_gone_after(token, res.stdout, max(1, reporting))


def test_in_mpi_mode_hang_leaves_no_segment(tmp_path):
    token = uuid.uuid4().hex
    res = subprocess.run(_mpiexec_argv("--hang-timeout", "6", _program(tmp_path, "hang")), capture_output=True,
                         text=True, timeout=120, env=_job_env(token), cwd=ROOT)
    assert res.returncode == 124, res.stderr
    _assert_gone_after(token, res.stdout)


def test_in_mpi_mode_ctrl_c_prints_one_line_per_rank_and_leaves_no_segment(tmp_path):
    token = uuid.uuid4().hex
    proc = subprocess.Popen(_mpiexec_argv(_program(tmp_path, "wait")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_job_env(token), cwd=ROOT,
                            start_new_session=True)
    head = _read_until_segments(proc, 2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C does to mpiexec: it forwards SIGINT to every rank
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    _assert_gone_after(token, head + out)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted (SIGINT); exit code 130" in err and "poprun_py: instance " in err, err


# -- the parts ------------------------------------------------------------------------------------
@pytest.fixture
def fake_segment():
    """A file in /dev/shm named like MPICH's, unique to this test, mapped by this process."""
    path = f"/dev/shm/mpich_shm_test{uuid.uuid4().hex[:12]}_0"
    with open(path, "wb") as f:
        f.truncate(4096)
    with open(path, "r+b") as f:
        mapping = mmap.mmap(f.fileno(), 4096)
    yield path, mapping
    mapping.close()
    if os.path.exists(path):
        os.unlink(path)


def test_a_process_maps_its_segment_until_it_is_unlinked(fake_segment):
    path, _mapping = fake_segment
    assert path in mapped_segments(os.getpid())
    assert mapped_segments(2**22 + 12345) == set()  # no such process
    assert remove_segments([path, path + "-gone"]) == [path]
    assert not os.path.exists(path)
    assert path not in mapped_segments(os.getpid())  # still mapped, but "(deleted)"


def test_files_not_named_like_an_mpi_segment_are_ignored(tmp_path):
    path = f"/dev/shm/poprun_test_{uuid.uuid4().hex[:12]}"
    with open(path, "wb") as f:
        f.truncate(4096)
    try:
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 4096):
            assert path not in mapped_segments(os.getpid())
    finally:
        os.unlink(path)


def test_the_tracker_scans_early_then_backs_off_and_after_progress():
    t = SegmentTracker(started=100.0)
    assert not t.due(100.0) and t.due(100.0 + SCAN_AT_S[0])
    for at in SCAN_AT_S:
        assert t.due(100.0 + at)
        t.scan([], now=100.0 + at)
    last = 100.0 + SCAN_AT_S[-1]
    assert not t.due(last + SCAN_EVERY_S - 1) and t.due(last + SCAN_EVERY_S)
    t.poke()
    assert not t.due(last + 1) and t.due(last + 5)
    t.segments.add("/dev/shm/mpich_shm_found_0")
    assert not t.due(last + 5)  # once one is known, progress reports cause no more scans


def test_the_tracker_scans_at_once_when_mpi_init_has_returned_until_a_segment_is_known():
    t = SegmentTracker(started=100.0)
    t.scan([], now=100.25)
    t.poke()
    assert not t.due(100.3)  # a plain report: not within PROGRESS_SCAN_EVERY_S of the last scan
    t.poke(mpi_ready=True)
    assert t.due(100.3)
    t.scan([], now=100.3)
    assert not t.due(100.31)  # one scan per MPI_READY report
    t.poke(mpi_ready=True)
    t.segments.add("/dev/shm/mpich_shm_found_0")
    assert not t.due(100.31)  # a known segment: the schedule is enough


def test_the_tracker_records_and_removes_what_the_processes_map(fake_segment):
    path, _mapping = fake_segment
    found = []
    t = SegmentTracker(on_new=found.append)
    assert t.scan([os.getpid()]) == {path} and found == [path]
    assert t.scan([os.getpid()]) == set() and found == [path]  # told once
    assert t.remove() == [path] and not os.path.exists(path)


def test_the_sweeper_removes_the_segments_of_an_agent_killed_by_sigkill(fake_segment):
    path, _mapping = fake_segment
    token = uuid.uuid4().hex
    code = ("import os, signal, sys\nfrom poprun_py.processes import start_sweeper, sweep_also\n"
            f"pid, fd = start_sweeper('X', 'y')\nsweep_also(fd, {path!r})\nos.kill(os.getpid(), signal.SIGKILL)\n")
    res = subprocess.run([sys.executable, "-c", code], env=_job_env(token), cwd=ROOT, timeout=60)
    assert res.returncode == -signal.SIGKILL
    gone, alive = psutil.wait_procs(processes_with_env(MARK, token), timeout=20)
    assert not alive and not os.path.exists(path)


def test_the_sweeper_leaves_the_files_alone_after_a_clean_end(fake_segment):
    path, _mapping = fake_segment
    pid, fd = start_sweeper(MARK, uuid.uuid4().hex)
    sweep_also(fd, path)
    os.write(fd, b"x")
    os.close(fd)
    psutil.Process(pid).wait(timeout=20)
    assert os.path.exists(path)
