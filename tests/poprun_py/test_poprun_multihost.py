"""Multi-host launcher mode, end to end, on emulated hosts.

Hydra's ssh launcher starts each host's proxy through ``fake_ssh.py`` (``-launcher ssh
-launcher-exec``), which runs it here in a UTS namespace of its own named after the host: the
MPI launcher, its proxies, the agents and the programs are the real ones, MPICH sees separate
nodes (ranks on different hosts talk through its network module, not shared memory), and every
process of a host can be found afterwards through that host's namespace.

Why namespaces rather than a host-name variable read by the agent: nothing in poprun_py knows it
is being tested, so ``socket.gethostname()``, MPICH's node detection and Hydra's per-host proxies
all behave as on a cluster; and a mount namespace can hide a path on one host only, which is how
the pre-flight test makes "the script is missing on host b" real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.poprun_py.launcher_helpers import assert_no_leftovers, launcher_env, poprun, write_script

FAKE_SSH = Path(__file__).with_name("fake_ssh.py")


def _namespaces_work() -> bool:
    try:
        return subprocess.run(["unshare", "--uts", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [
    pytest.mark.multihost,
    pytest.mark.skipif(not _namespaces_work(), reason="emulated hosts need `unshare --uts` (root or user namespaces)"),
]


class FakeHosts:
    """Emulated hosts for one test: the launcher options, the environment, and what ran where."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.record = folder / "hosts.txt"
        self.ssh = folder / "ssh"  # so that every proxy's command line names this test's folder
        self.ssh.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SSH} \"$@\"\n")
        self.ssh.chmod(0o755)

    def options(self) -> list[str]:
        return ["--mpi-global-args", f"-launcher ssh -launcher-exec {self.ssh}"]

    def env(self, **extra: str) -> dict[str, str]:
        return launcher_env(FAKE_SSH_RECORD=str(self.record), **extra)

    def namespaces(self) -> dict[str, set[str]]:
        """Host -> the UTS namespaces its processes ran in (one per start through ssh)."""
        found: dict[str, set[str]] = {}
        if self.record.exists():
            for line in self.record.read_text().splitlines():
                host, ns, _pid = line.split()
                found.setdefault(host, set()).add(ns)
        return found

    def assert_nothing_left(self, timeout: float = 5.0) -> None:
        """No process is left in any namespace of any host (the job's whole tree, per host)."""
        for host, spaces in self.namespaces().items():
            procs = [p for p in _processes_in(spaces)]
            _, alive = psutil.wait_procs(procs, timeout=timeout)
            alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            for p in alive:
                p.kill()
            assert not alive, f"left running on host {host}: {[(p.pid, p.cmdline()) for p in alive]}"
        assert_no_leftovers(str(self.folder))


def _processes_in(spaces: set[str]) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.readlink(f"/proc/{proc.pid}/ns/uts") in spaces:
                found.append(proc)
        except (OSError, psutil.NoSuchProcess):
            pass
    return found


@pytest.fixture
def hosts(tmp_path) -> FakeHosts:
    return FakeHosts(tmp_path)


def _two_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))[:2]


def _pin_to_two_cpus() -> None:
    """The launcher (and so every host) may use two CPUs: the expected placement is then exact."""
    os.sched_setaffinity(0, _two_cpus())


WHERE = """
import json, os, socket
import numpy as np, poprun_py as popdist
popdist.init()
total = popdist.get_comm().allreduce(np.array([1.0 + popdist.getInstanceIndex()]), op="sum")
print("where " + json.dumps({"hostname": socket.gethostname(), "env_host": os.environ["POPRUN_HOST"],
      "local": popdist.getLocalInstanceIndex(), "cpus": sorted(os.sched_getaffinity(0)), "sum": total[0],
      "uts": os.readlink("/proc/self/ns/uts")}))
"""


@pytest.mark.parametrize("form", ["-H", "--hostfile"])
def test_instances_are_placed_per_host_with_local_indices_and_cpus(hosts, tmp_path, form):
    script = write_script(tmp_path / "where.py", WHERE)
    if form == "-H":
        names, where = ["a", "b"], ["-H", "a,b"]
    else:
        names = ["node-x", "node-y"]
        (tmp_path / "hostfile").write_text("# two emulated hosts\nnode-x slots=2\n\nnode-y:2  # second\n")
        where = ["--hostfile", str(tmp_path / "hostfile")]
    res = poprun(*where, *hosts.options(), "--num-instances", "4", "--num-replicas", "8", "--log-dir",
                 str(tmp_path / "logs"), "--output-tag", "[{host}/{instance}/{local}] ", "python", script,
                 env=hosts.env(), preexec_fn=_pin_to_two_cpus)
    assert res.returncode == 0, res.stderr
    spaces = hosts.namespaces()
    cpus = _two_cpus()
    seen = {}
    for line in res.stdout.splitlines():
        tag, _, body = line.partition(" where ")
        host, instance, local = tag.strip("[]").split("/")
        seen[int(instance)] = (host, int(local), json.loads(body))
    assert sorted(seen) == [0, 1, 2, 3]
    for i, (tag_host, tag_local, rec) in seen.items():
        host, local = names[i // 2], i % 2
        assert (tag_host, tag_local) == (host, local)  # the output tag carries the host
        assert rec["hostname"] == rec["env_host"] == host
        assert rec["uts"] in spaces[host]  # it really ran inside that host's namespace
        assert rec["local"] == local
        assert rec["cpus"] == [cpus[local % len(cpus)]]  # the same placement on each host
        assert rec["sum"] == 10.0  # 1 + 2 + 3 + 4, all-reduced across the hosts
    run = json.loads((tmp_path / "logs" / "run.json").read_text())
    recorded = run["attempts"][0]["instances"]
    assert [(r["host"], r["cpus"]) for r in recorded] == [(names[i // 2], [cpus[i % 2 % len(cpus)]]) for i in range(4)]
    hosts.assert_nothing_left()


FAIL_ON_SECOND_HOST = """
import sys, numpy as np, poprun_py as popdist
popdist.init(); comm = popdist.get_comm()
comm.allreduce(np.ones(2))
if popdist.getInstanceIndex() == 3:
    raise RuntimeError("disk full on the second host")
comm.barrier()  # the others wait here for instance 3, which never comes
"""


def test_a_failure_on_the_second_host_names_it_and_stops_every_host(hosts, tmp_path):
    script = write_script(tmp_path / "fail.py", FAIL_ON_SECOND_HOST)
    res = poprun("-H", "node[0-1]", *hosts.options(), "--num-instances", "4", "--num-replicas", "4",
                 "--log-dir", str(tmp_path / "logs"), "python", script, env=hosts.env())
    assert res.returncode == 1, res.stderr
    assert "instance 3 of 4 failed (host node1, pid" in res.stderr
    assert "RuntimeError: disk full on the second host" in res.stderr
    assert set(hosts.namespaces()) == {"node0", "node1"}  # the Slurm-style list became two hosts
    run = json.loads((tmp_path / "logs" / "run.json").read_text())
    attempt = run["attempts"][0]
    assert attempt["root_cause_instance"] == 3 and attempt["reason"] == "failed"
    assert [i["host"] for i in attempt["instances"]] == ["node0", "node0", "node1", "node1"]
    assert [i["stopped_by_launcher"] for i in attempt["instances"]] == [True, True, True, False]
    hosts.assert_nothing_left()


def test_preflight_names_an_unreachable_host_before_starting_anything(hosts, tmp_path):
    script = write_script(tmp_path / "where.py", WHERE)
    res = poprun("-H", "a,b", *hosts.options(), "--num-instances", "2", "--num-replicas", "2", "python", script,
                 env=hosts.env(FAKE_SSH_UNREACHABLE="b"))
    assert res.returncode == 2, res.stderr
    assert "host b: unreachable: ssh: connect to host b port 22: Connection refused" in res.stderr
    assert "host a: not checked" in res.stderr and "passwordless ssh" in res.stderr
    assert "where " not in res.stdout  # the job itself never started
    hosts.assert_nothing_left()


def test_preflight_finds_a_script_missing_on_one_host(hosts, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    script = write_script(code / "where.py", WHERE)
    res = poprun("-H", "a,b", *hosts.options(), "--num-instances", "2", "--num-replicas", "2", "python", script,
                 env=hosts.env(FAKE_SSH_HIDE=f"b:{code}"))
    assert res.returncode == 2, res.stderr
    assert f"host b: script '{script}' not found" in res.stderr
    assert "host a:" not in res.stderr and "failed on 1 of 2 hosts" in res.stderr
    hosts.assert_nothing_left()
