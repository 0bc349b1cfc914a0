import sys
from pathlib import Path

import pytest

from poprun_py.python_program import wrap_python
from poprun_py.cpu_binding import parse_cpulist, spread_cpus, thread_env


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


@pytest.mark.parametrize("nodes,allowed,index,count,expected", [
    ([[0, 1], [2, 3]], {0, 1, 2, 3}, 1, 2, [2, 3]),  # a NUMA node each
    ([[0, 1], [2, 3], [4, 5], [6, 7]], set(range(8)), 0, 2, [0, 1, 2, 3]),  # two nodes each
    ([[0, 1, 2, 3]], {0, 1, 2, 3}, 1, 2, [2, 3]),  # one node: split its CPUs
    ([[0, 1]], {0, 1}, 3, 4, [1]),  # more instances than CPUs: round-robin
    ([[0, 1], [2, 3]], {2, 3}, 0, 1, [2, 3]),  # only allowed CPUs count
])
def test_spread_cpus(nodes, allowed, index, count, expected):
    assert spread_cpus(nodes, allowed, index, count) == expected


def test_thread_env_respects_user_settings():
    assert thread_env(2, {"OMP_NUM_THREADS": "8"}) == {
        "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    assert "OMP_WAIT_POLICY" not in thread_env(1, {"OMP_WAIT_POLICY": "ACTIVE"})


PY = "/venv/bin/python3"


@pytest.mark.parametrize("program,expected", [
    (["train.py", "--lr", "1"], [PY, "-m", "poprun_py.bootstrap", "train.py", "--lr", "1"]),
    (["python", "-u", "train.py"], [PY, "-u", "-m", "poprun_py.bootstrap", "train.py"]),
    (["python3", "-m", "launch.train", "--x"], [PY, "-m", "poprun_py.bootstrap", "-m", "launch.train", "--x"]),
    (["/venv/bin/python", "t.py"], [PY, "-m", "poprun_py.bootstrap", "t.py"]),
    (["/usr/bin/python3", "t.py"], ["/usr/bin/python3", "t.py"]),  # another interpreter: untouched
    (["python2", "t.py"], ["python2", "t.py"]),
    (["python", "-c", "print(1)"], ["python", "-c", "print(1)"]),
    (["echo", "hi"], ["echo", "hi"]),
])
def test_wrap_python(program, expected):
    assert wrap_python(program, python=PY) == expected


def test_wrap_python_versioned_name():
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert wrap_python([name, "a.py"], python=PY)[:3] == [PY, "-m", "poprun_py.bootstrap"]
    assert wrap_python(["python3.2", "a.py"], python=PY) == ["python3.2", "a.py"]


def test_a_console_script_of_this_environment_runs_under_the_bootstrap(tmp_path):
    import sys

    from poprun_py.python_program import console_script

    script = tmp_path / "poprun-train"
    script.write_text(f"#!{tmp_path / 'python3'}\nimport sys\n")
    other = tmp_path / "tool"
    other.write_text("#!/bin/sh\necho hi\n")
    python = str(tmp_path / "python3")
    assert wrap_python(["poprun-train", "--x"], python=python) == [python, "-m", "poprun_py.bootstrap", str(script), "--x"]
    assert console_script("tool", python) is None and wrap_python(["tool"], python=python) == ["tool"]
    assert console_script("poprun-train", sys.executable) in (None, str(Path(sys.executable).parent / "poprun-train"))
