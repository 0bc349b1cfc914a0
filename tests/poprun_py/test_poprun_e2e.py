"""End-to-end runs of the launcher through the real MPI launcher (mpiexec from the mpich wheel).

Each test's program mentions a marker unique to the test (its tmp_path), so that the check for
processes left behind looks at this job's processes only.
"""

import json
import os
import signal
import sys

import pytest

from poprun_py.oom import oom_kill_count
from tests.poprun_py.launcher_helpers import ROOT, assert_no_leftovers, launcher_env, poprun, start_poprun, write_script

TOUCH = """
import json, os, sys
import poprun_py as popdist
import numpy as np
popdist.init()
i = popdist.getInstanceIndex()
comm = popdist.get_comm()
total = np.array([float(i)])
comm.allreduce(total, op="sum")
with open(os.path.join(sys.argv[1], f"instance_{i}.json"), "w") as f:
    json.dump({"env": {k: v for k, v in os.environ.items() if k.startswith(("POPDIST_", "POPRUN_"))},
               "sum": total[0], "threads": os.environ.get("OMP_NUM_THREADS"),
               "gathered": comm.allgather(np.array([i * 10])).ravel().tolist()}, f)
print(f"instance {i} wrote its file")
"""


@pytest.mark.parametrize("instances,replicas", [(1, 1), (2, 4), (4, 8)])
def test_each_instance_runs_with_its_contract(tmp_path, instances, replicas):
    script = write_script(tmp_path / "touch.py", TOUCH)
    res = poprun("--num-instances", str(instances), "--num-replicas", str(replicas), "python", script, str(tmp_path))
    assert res.returncode == 0, res.stderr
    local = replicas // instances
    for i in range(instances):
        data = json.loads((tmp_path / f"instance_{i}.json").read_text())
        assert data["env"]["POPDIST_INSTANCE_INDEX"] == str(i)
        assert data["env"]["POPDIST_REPLICA_INDEX_OFFSET"] == str(i * local)
        assert data["env"]["POPDIST_NUM_LOCAL_REPLICAS"] == str(local)
        assert data["sum"] == sum(range(instances))
        assert data["gathered"] == [10 * k for k in range(instances)]
        assert f"[{i}] instance {i} wrote its file" in res.stdout.splitlines()
    assert_no_leftovers(str(tmp_path))


def test_any_command_runs_and_output_is_tagged():
    res = poprun("--num-instances", "2", "--num-replicas", "2", "echo", "hello")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] hello", "[1] hello"]


RAISE = """
import time, numpy as np, poprun_py as popdist
popdist.init(); c = popdist.get_comm()
if popdist.getInstanceIndex() == 2:
    raise ValueError("bad batch on instance 2")
c.allreduce(np.ones(3))   # the others block here, waiting for instance 2
"""


def test_exception_brings_the_job_down_with_root_cause(tmp_path):
    script = write_script(tmp_path / "raise.py", RAISE)
    res = poprun("--num-instances", "4", "--num-replicas", "4", "--only-output-from-instance", "0",
                 "--log-dir", str(tmp_path / "logs"), "python", script)
    assert res.returncode == 1
    assert "poprun_py: instance 2 of 4 failed" in res.stderr
    assert "traceback from instance 2:" in res.stderr
    assert "ValueError: bad batch on instance 2" in res.stderr
    assert "bootstrap.py" not in res.stderr.split("traceback from instance 2:")[1]
    assert "[2]" not in res.stdout + res.stderr.split("poprun_py: instance 2")[0]  # filtered ...
    run = json.loads((tmp_path / "logs" / "run.json").read_text())  # ... but recorded
    attempt = run["attempts"][0]
    assert (attempt["reason"], attempt["root_cause_instance"], attempt["exit_code"]) == ("failed", 2, 1)
    assert [i["exit_code"] for i in attempt["instances"]][2] == 1
    # the others were stopped by the launcher, or died of MPI noticing instance 2's death first
    assert all(i["stopped_by_launcher"] or i["exit_code"] != 0 for k, i in enumerate(attempt["instances"]) if k != 2)
    assert "bad batch" in (tmp_path / "logs" / "attempt_0" / "instance_2" / "stderr.log").read_text()
    assert_no_leftovers(str(tmp_path))


@pytest.mark.parametrize("body,code,text", [
    ("import sys; sys.exit(3)", 3, "exit code 3"),
    # a SIGKILL the program sent itself is not an out-of-memory kill (unknown where no cgroup counter is readable)
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9,
     "not by the OOM killer" if oom_kill_count() is not None else "either the kernel's OOM killer or another"),
    ("import ctypes; ctypes.string_at(0)", 128 + 11, "segmentation fault"),
])
def test_exit_codes_and_signals_are_reported(tmp_path, body, code, text):
    script = write_script(tmp_path / "die.py", f"""
import numpy as np, poprun_py as popdist
popdist.init()
if popdist.getInstanceIndex() == 1:
    {body}
popdist.get_comm().allreduce(np.ones(1))
""")
    res = poprun("--num-instances", "2", "--num-replicas", "2", "python", script)
    assert res.returncode == code, res.stderr
    assert "instance 1 of 2 failed" in res.stderr and text in res.stderr
    assert_no_leftovers(str(tmp_path))


SLEEPY = """
import os, signal, subprocess, sys
import poprun_py as popdist
popdist.init()
subprocess.Popen([sys.executable, "-c", "import os, signal; os.setsid(); signal.pause()", sys.argv[1]])
subprocess.Popen(["sleep", "600"])
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, lambda *a: print("SIGTERM ignored", flush=True))
signal.signal(signal.SIGUSR1, lambda *a: print("got SIGUSR1", flush=True))
print("ready", flush=True)
while True:
    signal.pause()
"""


def _wait_for(proc, needle: str, count: int) -> list[str]:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if sum(needle in s for s in seen) >= count:
            return seen
    raise AssertionError(f"launcher ended before {count} x {needle!r}: {seen} {proc.stderr.read()}")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_every_process_including_grandchildren(tmp_path, sig, code):
    script = write_script(tmp_path / "sleepy.py", SLEEPY)
    proc = start_poprun("--num-instances", "2", "--num-replicas", "2", "python", script, str(tmp_path))
    _wait_for(proc, "ready", 2)
    proc.send_signal(signal.SIGUSR1)  # forwarded to the programs
    _wait_for(proc, "got SIGUSR1", 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert f"received {signal.Signals(sig).name}" in err
    assert_no_leftovers(str(tmp_path))


def test_program_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = write_script(tmp_path / "stubborn.py", SLEEPY)
    proc = start_poprun("--num-instances", "2", "--num-replicas", "2", "--grace-period", "1",
                        "python", script, str(tmp_path), "ignore-term")
    _wait_for(proc, "ready", 2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert out.count("SIGTERM ignored") == 2  # got it once each, then SIGKILL
    assert_no_leftovers(str(tmp_path))


HANG = """
import signal, numpy as np, poprun_py as popdist
popdist.init(); c = popdist.get_comm()
for step in range(3):
    popdist.report_progress(f"step {step}")
    c.allreduce(np.ones(2))
if popdist.getInstanceIndex() == 1:
    popdist.report_progress("stuck in a loop")
    while True:
        signal.pause()
c.allreduce(np.ones(2))
"""


def test_hang_timeout_names_the_stuck_instance(tmp_path):
    script = write_script(tmp_path / "hang.py", HANG)
    res = poprun("--num-instances", "2", "--num-replicas", "2", "--hang-timeout", "6", "python", script)
    assert res.returncode == 124, res.stderr
    assert "no progress for 6 s" in res.stderr
    assert "instance 1 (host" in res.stderr and "stuck in a loop" in res.stderr
    assert "instance 0 (host" in res.stderr and "in allreduce #4" in res.stderr
    assert "likely culprit: instance 1 never reached the collective that instance 0 waits in" in res.stderr
    assert_no_leftovers(str(tmp_path))


def test_lines_never_interleave_and_progress_bars_render(tmp_path):
    script = write_script(tmp_path / "chatty.py", """
import os, sys
i = os.environ["POPDIST_INSTANCE_INDEX"]
for n in range(300):
    sys.stdout.write(f"instance {i} line {n} " + "x" * 200 + "\\n")
sys.stderr.write("\\r 10%|#   |\\r 50%|##  |\\r100%|####|\\n")
""")
    res = poprun("--num-instances", "4", "--num-replicas", "4", "python", script)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1200
    for line in lines:
        tag, rest = line.split(" ", 1)
        assert rest.startswith(f"instance {tag[1:-1]} line ") and rest.endswith("x" * 200)
    err = res.stderr.splitlines()
    for i in range(4):
        assert f"[{i}]  10%|#   |" in err and f"[{i}] 100%|####|" in err


def test_max_restarts_restarts_a_failed_job(tmp_path):
    script = write_script(tmp_path / "flaky.py", """
import os, sys
if os.environ["POPRUN_RESTART_COUNT"] == "0" and os.environ["POPDIST_INSTANCE_INDEX"] == "1":
    sys.exit(5)
print("attempt", os.environ["POPRUN_RESTART_COUNT"], "ok")
""")
    res = poprun("--num-instances", "2", "--num-replicas", "2", "--max-restarts", "2",
                 "--log-dir", str(tmp_path / "logs"), "python", script)
    assert res.returncode == 0, res.stderr
    assert "restarting the job (1 of 2)" in res.stderr
    run = json.loads((tmp_path / "logs" / "run.json").read_text())
    assert [a["reason"] for a in run["attempts"]] == ["failed", "ok"]
    assert run["exit_code"] == 0
    assert {i["host"] for i in run["attempts"][1]["instances"]} != {None}
    assert (tmp_path / "logs" / "attempt_1" / "instance_0" / "stdout.log").read_text() == "attempt 1 ok\n"


def test_in_mpi_mode_runs_the_script_in_the_rank_process(tmp_path):
    import subprocess

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    script = write_script(tmp_path / "touch.py", TOUCH)
    res = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "poprun_py", "--num-replicas", "4",
                          script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                         env=launcher_env(), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    data = [json.loads((tmp_path / f"instance_{i}.json").read_text()) for i in range(2)]
    assert [d["env"]["POPDIST_NUM_LOCAL_REPLICAS"] for d in data] == ["2", "2"]
    assert [d["sum"] for d in data] == [1.0, 1.0]


def test_in_mpi_mode_failure_aborts_all_ranks(tmp_path):
    import subprocess

    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    script = write_script(tmp_path / "raise.py", RAISE)
    res = subprocess.run([mpiexec, "-n", "4", sys.executable, "-m", "poprun_py", script],
                         capture_output=True, text=True, timeout=60, env=launcher_env(), cwd=ROOT)
    assert res.returncode != 0
    assert "bad batch on instance 2" in res.stderr
    assert_no_leftovers(str(tmp_path))


def test_failure_stops_peers_that_ignore_sigterm_while_blocked(tmp_path):
    script = write_script(tmp_path / "stubborn_peer.py", """
import signal, sys, numpy as np, poprun_py as popdist
popdist.init(); c = popdist.get_comm()
signal.signal(signal.SIGTERM, lambda *a: print("SIGTERM ignored", flush=True))
if popdist.getInstanceIndex() == 1:
    sys.exit(4)
c.barrier()  # blocked for good: instance 1 never arrives
""")
    res = poprun("--num-instances", "2", "--num-replicas", "2", "--grace-period", "600", "python", script)
    assert res.returncode == 4  # the failure's grace is short, whatever --grace-period says
    assert "instance 1 of 2 failed" in res.stderr
    assert_no_leftovers(str(tmp_path))


def test_every_instance_gets_its_grace_period_to_checkpoint(tmp_path):
    """A preempted job: each program saves a checkpoint in its SIGTERM handler, and instance 1's save
    ends only after instance 0's has (instance 0 tells it so with SIGUSR2). Instance 0 finishing
    first must not get instance 1 killed before it is done."""
    script = write_script(tmp_path / "ckpt_on_term.py", """
import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})  # before any thread starts: sigwait takes it
import poprun_py as popdist
popdist.init()
i = popdist.getInstanceIndex()
folder = sys.argv[1]
def save(*_):
    if i == 1:  # the slower save: it waits for instance 0's
        signal.sigwait({signal.SIGUSR2})
    open(os.path.join(folder, f"ckpt_{i}"), "w").close()
    if i == 0:
        with open(os.path.join(folder, "pid_1")) as f:
            os.kill(int(f.read()), signal.SIGUSR2)
    sys.exit(0)
signal.signal(signal.SIGTERM, save)
if i == 1:
    with open(os.path.join(folder, "pid_1.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(folder, "pid_1.tmp"), os.path.join(folder, "pid_1"))
print("ready", flush=True)
while True:
    signal.pause()
""")
    proc = start_poprun("--num-instances", "2", "--num-replicas", "2", "--grace-period", "30",
                        "--log-dir", str(tmp_path / "logs"), "python", script, str(tmp_path))
    _wait_for(proc, "ready", 2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert (tmp_path / "ckpt_0").exists() and (tmp_path / "ckpt_1").exists()
    instances = json.loads((tmp_path / "logs" / "run.json").read_text())["attempts"][0]["instances"]
    assert [(i["exit_code"], i["stopped_by_launcher"]) for i in instances] == [(0, True), (0, True)]
    assert_no_leftovers(str(tmp_path))


def test_execute_on_instances_restricts_collectives(tmp_path):
    script = write_script(tmp_path / "subset.py", """
import numpy as np, poprun_py as popdist
popdist.init()
def count_members():
    one = np.ones(1)
    popdist.get_comm().allreduce(one)   # only the chosen instances take part
    return int(one[0])
got = popdist.execute_on_instances({0, 2}, count_members)
print("result", got)
total = np.ones(1); popdist.get_comm().allreduce(total)   # the world again afterwards
print("world", int(total[0]))
""")
    res = poprun("--num-instances", "4", "--num-replicas", "4", "python", script)
    assert res.returncode == 0, res.stderr
    lines = set(res.stdout.splitlines())
    assert {"[0] result 2", "[2] result 2", "[1] result None", "[3] result None"} <= lines
    assert {f"[{i}] world 4" for i in range(4)} <= lines


def test_srun_step_variables_make_an_instance(tmp_path):
    script = write_script(tmp_path / "touch.py", TOUCH)
    res = poprun(script, str(tmp_path), env=launcher_env(SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="1",
                                                        SLURM_LOCALID="0"))
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "instance_0.json").read_text())
    assert data["env"]["POPDIST_NUM_INSTANCES"] == "1" and data["env"]["POPDIST_NUM_TOTAL_REPLICAS"] == "1"
    assert "[0]" not in res.stdout  # no launcher in between: the program's own output


def test_in_mpi_mode_leaves_logging_to_the_program(tmp_path):
    script = write_script(tmp_path / "logs.py", """
import logging, sys
logging.basicConfig(level=logging.INFO, format="program: %(message)s", stream=sys.stdout)
logging.getLogger("train").info("an info record")
""")
    res = poprun(script, env=launcher_env(SLURM_PROCID="0", SLURM_STEP_NUM_TASKS="1", SLURM_LOCALID="0"))
    assert res.returncode == 0, res.stderr
    assert res.stdout == "program: an info record\n"


def test_env_contract_without_mpi_is_refused_clearly(tmp_path):
    script = write_script(tmp_path / "touch.py", TOUCH)
    # a hand-made contract for 2 instances, but MPI (a singleton here) has one process
    res = poprun("--mode", "instance", "--num-instances", "2", "--num-replicas", "2", script, str(tmp_path),
                 env=launcher_env(PMI_RANK="0", PMI_SIZE="2"))
    assert res.returncode != 0
    assert "MPI says rank 0 of 1 but the PopDist environment says instance 0 of 2" in res.stderr
