"""The Slurm tests' cluster: one per test session, started on first use, stopped at the end.

Skipped, with the reason, where Slurm or munge is not installed (``.ci/run`` installs them with
``apt-get install -y slurm-wlm munge`` when it runs as root) or where the tests do not run as root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.slurm.slurm_cluster import SlurmCluster, leftover_processes, skip_reason
from tests.slurm.slurm_jobs import DENSE, ROOT, job_env

_started: list[SlurmCluster] = []


@pytest.fixture(scope="session")
def slurm() -> SlurmCluster:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # A short path: Slurm's and munge's unix sockets live in it (at most 107 bytes with the host name).
    cluster = SlurmCluster(tempfile.mkdtemp(prefix="slurm-")).start()
    _started.append(cluster)
    yield cluster
    killed = cluster.stop()
    left = leftover_processes(cluster.root)
    assert not killed and not left, f"processes left after the jobs (logs in {cluster.root}): {killed} {left}"
    shutil.rmtree(cluster.root, ignore_errors=True)


def pytest_terminal_summary(terminalreporter) -> None:
    for cluster in _started:
        terminalreporter.write_line(f"Slurm test cluster ({cluster.cpus} CPUs): up in {cluster.startup_s:.2f} s")


@pytest.fixture(scope="session")
def launcher_reference(slurm, tmp_path_factory) -> Path:
    """The small dense run under the launcher (2 instances x 2 replicas), no Slurm involved."""
    run_dir = tmp_path_factory.mktemp("launcher-reference")
    proc = subprocess.run([sys.executable, "-m", "poprun_py", "--num-instances", "2", "--num-replicas", "4",
                           "python", "-m", "launch.train", "--config", "dense", *DENSE, "--set", f"run.run_dir={run_dir}"],
                          cwd=ROOT, env=job_env(slurm), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir
