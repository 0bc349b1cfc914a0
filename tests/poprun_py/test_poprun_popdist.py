"""``import popdist`` in programs poprun_py starts: poprun_py's runtime, unless a real PopDist SDK is
installed (POPRUN_POPDIST chooses; poprun_py/_popdist_shim/popdist/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from poprun_py import env as envc
from poprun_py.mpi_command import find_mpiexec
from tests.poprun_py.launcher_helpers import ROOT, launcher_env, poprun, write_script

# As Graphcore's PopDist documentation writes it: the import line unchanged.
TUTORIAL = """\
import popdist

popdist.init()
print("isPopdistEnvSet", popdist.isPopdistEnvSet())
print("getNumTotalReplicas", popdist.getNumTotalReplicas())
print("getNumInstances", popdist.getNumInstances())
print("getInstanceIndex", popdist.getInstanceIndex())
print("getNumLocalReplicas", popdist.getNumLocalReplicas())
print("getReplicaIndexOffset", popdist.getReplicaIndexOffset())
print("getNumIpusPerReplica", popdist.getNumIpusPerReplica())
print("getDeviceId", popdist.getDeviceId())
print("get_num_local_replicas", popdist.get_num_local_replicas())
print("implementation", getattr(popdist, "IMPLEMENTATION", "sdk"))
"""

# 2 instances x 2 replicas x 2 IPUs = 8 IPUs: devices 0-7 singles, 8-11 pairs, 12-13 quads.
EXPECTED = {
    0: {"isPopdistEnvSet": "True", "getNumTotalReplicas": "4", "getNumInstances": "2", "getInstanceIndex": "0",
        "getNumLocalReplicas": "2", "getReplicaIndexOffset": "0", "getNumIpusPerReplica": "2",
        "getDeviceId": "12", "get_num_local_replicas": "2", "implementation": "poprun_py"},
    1: {"isPopdistEnvSet": "True", "getNumTotalReplicas": "4", "getNumInstances": "2", "getInstanceIndex": "1",
        "getNumLocalReplicas": "2", "getReplicaIndexOffset": "2", "getNumIpusPerReplica": "2",
        "getDeviceId": "13", "get_num_local_replicas": "2", "implementation": "poprun_py"},
}


def _values(lines: list[str]) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in lines if line)


def test_a_popdist_tutorial_script_runs_unchanged_under_the_launcher(tmp_path):
    script = write_script(tmp_path / "tutorial.py", TUTORIAL)
    res = poprun("--num-instances", "2", "--num-replicas", "4", "--ipus-per-replica", "2", "python", script)
    assert res.returncode == 0, res.stderr
    by_instance = {i: _values([ln[len(f"[{i}] "):] for ln in res.stdout.splitlines() if ln.startswith(f"[{i}] ")])
                   for i in (0, 1)}
    assert by_instance == EXPECTED


def test_a_popdist_tutorial_script_runs_unchanged_in_mpi_mode(tmp_path):
    """Each rank's output goes to a file of its own (Hydra's -outfile-pattern): the ranks' unbuffered
    prints would otherwise interleave word by word in mpiexec's stdout."""
    script = write_script(tmp_path / "tutorial.py", TUTORIAL)
    res = subprocess.run([find_mpiexec(None), "-outfile-pattern", str(tmp_path / "out.%r"), "-n", "2", sys.executable,
                          "-m", "poprun_py", "--num-replicas", "4", "--ipus-per-replica", "2", script],
                         capture_output=True, text=True, timeout=120, env=launcher_env(), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    by_rank = {i: _values((tmp_path / f"out.{i}").read_text().splitlines()) for i in (0, 1)}
    assert by_rank == EXPECTED


@pytest.fixture
def fake_sdk(tmp_path):
    """A stand-in for the Poplar SDK's popdist, with a framework submodule."""
    pkg = tmp_path / "sdk" / "popdist"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("IMPLEMENTATION = 'sdk'\ndef getInstanceIndex():\n    return 42\n")
    (pkg / "tensorflow.py").write_text("NAME = 'popdist.tensorflow of the sdk'\n")
    return str(tmp_path / "sdk")


def _import_popdist(pythonpath: list[str], choice: str | None, code: str = "") -> subprocess.CompletedProcess:
    env = launcher_env(PYTHONPATH=os.pathsep.join([ROOT, *pythonpath]))
    if choice is not None:
        env[envc.CHOOSE_POPDIST] = choice
    body = "import popdist; print(popdist.IMPLEMENTATION, popdist.getInstanceIndex())" + code
    return subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, env=env, timeout=60,
                          cwd=ROOT)


def test_auto_hands_over_to_an_sdk_found_after_our_folder(fake_sdk):
    """PYTHONPATH comes before site-packages: our folder first, the SDK after it, as a pip-installed
    SDK would be; auto and sdk load the SDK's module in place of ours, submodules included."""
    for choice in (None, "auto", "sdk"):
        res = _import_popdist([envc.SHIM_FOLDER, fake_sdk], choice, "; import popdist.tensorflow as t; print(t.NAME)")
        assert res.stdout.split("\n")[:2] == ["sdk 42", "popdist.tensorflow of the sdk"], (choice, res.stderr)
    ours = _import_popdist([envc.SHIM_FOLDER, fake_sdk], "ours")
    assert ours.returncode == 0 and ours.stdout.strip() == "poprun_py 0", ours.stderr


def test_without_an_sdk_auto_gives_ours_and_sdk_says_how_to_fix():
    assert _import_popdist([envc.SHIM_FOLDER], "auto").stdout.strip() == "poprun_py 0"
    missing = _import_popdist([envc.SHIM_FOLDER], "sdk")
    assert missing.returncode != 0
    assert "POPRUN_POPDIST=sdk but no PopDist SDK is importable" in missing.stderr
    assert "POPRUN_POPDIST=ours (or auto)" in missing.stderr
    bad = _import_popdist([envc.SHIM_FOLDER], "mine")
    assert bad.returncode != 0 and "POPRUN_POPDIST='mine': use auto" in bad.stderr


def test_the_launcher_offers_popdist_and_lets_another_one_win_unless_told_ours(fake_sdk):
    """Launcher mode: our folder goes after the user's PYTHONPATH (auto) or before it (ours)."""
    code = "import popdist; print('got', popdist.IMPLEMENTATION)"
    env = launcher_env()
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + fake_sdk  # the user's own path has a popdist
    auto = poprun("python", "-c", code, env=env)
    assert auto.returncode == 0 and auto.stdout.strip() == "[0] got sdk", auto.stderr
    ours = poprun("python", "-c", code, env={**env, envc.CHOOSE_POPDIST: "ours"})
    assert ours.returncode == 0 and ours.stdout.strip() == "[0] got poprun_py", ours.stderr
    bad = poprun("python", "-c", code, env={**env, envc.CHOOSE_POPDIST: "mine"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("poprun_py: error: POPRUN_POPDIST='mine': use auto (a PopDist SDK wins")


def test_our_folder_goes_last_unless_ours_and_only_once():
    d = envc.SHIM_FOLDER
    assert envc.with_popdist(["a", d, "b"], "auto") == ["a", "b", d]
    assert envc.with_popdist(["a", "b"], "sdk") == ["a", "b", d]
    assert envc.with_popdist(["a", d], "ours") == [d, "a"]
    assert envc.python_path_with_popdist(None, "auto") == d
    assert envc.python_path_with_popdist(f"x{os.pathsep}y", "auto") == os.pathsep.join(["x", "y", d])


def test_the_popdist_folder_is_packaged_and_installs_no_top_level_popdist():
    from setuptools import find_packages

    packages = find_packages(ROOT, include=["poprun_py*", "ipu*", "models*", "data*", "launch*"])
    assert "poprun_py._popdist_shim.popdist" in packages
    assert not any(p == "popdist" or p.startswith("popdist.") for p in packages)
    assert os.path.isfile(os.path.join(envc.SHIM_FOLDER, "popdist", "__init__.py"))
