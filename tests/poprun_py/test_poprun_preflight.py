"""The pre-flight checks' pure parts: what keeps a program from starting, ssh errors per host,
the MPI command of the checks, and when the checks run (the end-to-end runs are in
test_poprun_multihost.py)."""

import json

import pytest

from poprun_py import __version__
from poprun_py.cli import config_from_args, parse_args
from poprun_py.config import validate_config
from poprun_py.preflight import (_names_host, check_host, format_problems, preflight_argv, program_problems,
                                 ssh_problem)


@pytest.fixture
def code(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("")
    return tmp_path


def test_program_problems_name_what_is_missing(code, monkeypatch):
    monkeypatch.chdir(code)
    cwd = str(code)
    assert program_problems(["train.py"], cwd) == []
    assert program_problems(["nope.py"], cwd) == [f"program 'nope.py' not found (working directory {cwd})"]
    assert program_problems(["no-such-tool-xyz", "a"], cwd) == [
        "program 'no-such-tool-xyz' not found on PATH or not executable: give its path"]
    assert program_problems(["python", "-u", "gone.py"], cwd) == [f"script 'gone.py' not found (working directory {cwd})"]
    assert program_problems(["python", "-c", "print(1)"], cwd) == []
    assert program_problems(["python3", "-m", "pkg.gone"], cwd) == []  # the launcher never imports modules
    assert program_problems(["python3", "-m", "pkg.mod"], cwd, modules=True) == []
    missing = program_problems(["python", "-m", "pkg.gone"], cwd, modules=True)
    assert len(missing) == 1 and missing[0].startswith(f"module 'pkg.gone' not found (working directory {cwd}")


def test_a_host_reports_version_working_directory_and_log_dir_problems(code, monkeypatch, tmp_path):
    monkeypatch.chdir(code)
    spec = {"version": __version__, "cwd": str(code), "program": ["python", "train.py"],
            "log_dir": str(tmp_path / "logs")}
    assert check_host(spec) == [] and (tmp_path / "logs").is_dir()
    other = check_host({**spec, "version": "0.0.9"})
    assert len(other) == 1 and "the launcher runs 0.0.9: install the same version on every host" in other[0]
    moved = check_host({**spec, "cwd": "/no/such/dir"})
    assert moved == [f"working directory /no/such/dir does not exist here (the rank started in {code})"]


def test_ssh_errors_are_matched_to_their_host_only():
    assert _names_host("ssh: connect to host b port 22: Connection refused", "b")
    assert _names_host("ssh: Could not resolve hostname node1: Name or service not known", "node1")
    assert not _names_host("ssh: Could not resolve hostname node10: Name or service not known", "node1")
    assert not _names_host("ssh: connect to host b.example port 22: Connection refused", "b")
    assert not _names_host("[mpiexec@b] launch proxy failed", "b")  # not an ssh message
    assert _names_host("ssh: Could not resolve hostname nodea: Name or service not known", "nodeA")  # ssh lower-cases


def test_an_ssh_failure_leads_with_its_cause_names_the_host_and_the_fix():
    resolve = ssh_problem("nodeA", "ssh: Could not resolve hostname nodea: Name or service not known")
    assert resolve.startswith("host nodeA: name not resolved: ssh: Could not resolve hostname nodea")
    assert "`getent hosts nodeA`" in resolve and "-H/--hostfile" in resolve
    refused = ssh_problem("b", "ssh: connect to host b port 22: Connection refused")
    assert refused.startswith("host b: unreachable: ssh: connect to host b port 22: Connection refused; check")
    login = ssh_problem("b", "b: Permission denied (publickey,password).")
    assert login.startswith("host b: ssh login refused:") and "ssh -o BatchMode=yes b true" in login


def test_the_checks_run_one_rank_per_host_through_the_jobs_mpi_options():
    config = validate_config(program=("python", "t.py"), num_instances=4, num_replicas=8, hosts=("a", "b"),
                             mpi_global_args=("-launcher", "ssh"))
    argv = preflight_argv(config, mpiexec="/x/mpiexec", flavor="hydra", python="/venv/bin/python")
    assert argv[:8] == ["/x/mpiexec", "-hosts", "a:1,b:1", "-launcher", "ssh", "-n", "2", "/venv/bin/python"]
    assert argv[8:10] == ["-m", "poprun_py.preflight"]
    assert json.loads(argv[10])["program"] == ["python", "t.py"]


def test_the_checks_are_on_by_default_with_several_hosts_only():
    def preflight(*argv):
        return config_from_args(parse_args([*argv, "prog"], {})).preflight

    assert preflight("-H", "a,b", "--num-instances", "2", "--num-replicas", "2") is True
    assert preflight("-H", "a,b", "--num-instances", "2", "--num-replicas", "2", "--preflight", "no") is False
    assert preflight() is False
    assert preflight("--preflight") is True


def test_the_report_counts_failing_hosts_and_says_how_to_fix():
    text = format_problems(["host a: not checked (...)", "host b: unreachable: ssh: ..."], 2)
    assert text.startswith("pre-flight checks failed on 1 of 2 hosts:\n  host a: not checked")
    assert "passwordless ssh" in text and "--preflight no" in text
