"""Injected faults (POPRUN_FAULT): parsing, who they hit, and that they strike at the exact report."""

import re
import signal
import subprocess
import sys

import pytest

from poprun_py.env import read_fault
from poprun_py.errors import EnvironmentContractError
from poprun_py.faults import EVERY, WAIT, Fault, parse_fault
from tests.poprun_py.launcher_helpers import ROOT, launcher_env


def test_a_fault_is_read_from_its_text_and_written_back():
    fault = parse_fault("instance=1,at=checkpoint 10: renaming,signal=STOP,attempt=2")
    assert fault == Fault(1, "checkpoint 10: renaming", signal.SIGSTOP, 2)
    assert parse_fault(fault.encode()) == fault
    assert parse_fault("instance=0,at=step 3") == Fault(0, "step 3", signal.SIGKILL, 0)
    assert parse_fault("instance=0,at=step 3,signal=SIGTERM").signal == signal.SIGTERM
    waits = parse_fault("instance=*,at=step 3,signal=WAIT")
    assert waits == Fault(EVERY, "step 3", WAIT, 0) and parse_fault(waits.encode()) == waits


@pytest.mark.parametrize("text,message", [
    ("instance=1", "needs instance= and at="),
    ("instance=one,at=step 1", "take integers"),
    ("instance=1,at=step 1,signal=NAP", "signal='NAP' is not a signal name"),
    ("instance=1,at=step 1,when=now", "unknown: ['when']"),
    ("instance=1,step 1", "is not key=value"),
])
def test_bad_fault_text_names_the_problem_and_the_format(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_fault(text)
    with pytest.raises(EnvironmentContractError, match="POPRUN_FAULT="):
        read_fault({"POPRUN_FAULT": text})


def test_a_fault_hits_only_its_instance_in_its_attempt():
    env = {"POPRUN_FAULT": "instance=1,at=step 2,attempt=1"}
    assert read_fault(env) is None  # instance 0, attempt 0 outside a launcher
    assert read_fault({**env, "POPDIST_INSTANCE_INDEX": "1"}) is None
    hit = read_fault({**env, "POPDIST_INSTANCE_INDEX": "1", "POPRUN_RESTART_COUNT": "1"})
    assert hit == Fault(1, "step 2", signal.SIGKILL, 1)
    assert read_fault({}) is None
    every = {"POPRUN_FAULT": "instance=*,at=step 2,signal=WAIT"}
    assert read_fault(every) == read_fault({**every, "POPDIST_INSTANCE_INDEX": "3"}) == Fault(EVERY, "step 2", WAIT)
    assert read_fault({**every, "POPRUN_RESTART_COUNT": "1"}) is None


REPORTS = """
from poprun_py.progress import report_progress
for n in range(1, 5):
    report_progress(f"step {n}")
    print("after", n, flush=True)
"""


def test_the_fault_strikes_right_after_the_named_report():
    proc = subprocess.run([sys.executable, "-c", REPORTS], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=launcher_env(POPRUN_FAULT="instance=0,at=step 2,signal=KILL"))
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout == "after 1\n"
    assert "poprun_py: injected fault: SIGKILL to instance 0" in proc.stderr and "at 'step 2'" in proc.stderr
    untouched = subprocess.run([sys.executable, "-c", REPORTS], capture_output=True, text=True, timeout=60,
                               cwd=ROOT, env=launcher_env(POPRUN_FAULT="instance=0,at=step 9"))
    assert untouched.returncode == 0 and untouched.stdout.count("after") == 4


WAITS = """
import signal
from poprun_py.progress import report_progress
signal.signal(signal.SIGUSR1, lambda *_: print("SIGUSR1 recorded", flush=True))
for n in range(1, 4):
    report_progress(f"step {n}")
    print("after", n, flush=True)
"""


def test_a_wait_fault_holds_the_instance_at_the_report_until_sigusr1_arrives():
    """``signal=WAIT``: the line comes once the wait is in place; the signal, handled by the program's
    own handler, ends it, and the program goes on from the report."""
    proc = subprocess.Popen([sys.executable, "-c", WAITS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=launcher_env(POPRUN_FAULT="instance=*,at=step 2,signal=WAIT",
                                                       POPDIST_INSTANCE_INDEX="1"))
    try:
        line = proc.stderr.readline()
        assert line.startswith("poprun_py: injected fault: SIGUSR1 awaited by instance * (pid") and "at 'step 2'" in line
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == "after 1\nSIGUSR1 recorded\nafter 2\nafter 3\n"
