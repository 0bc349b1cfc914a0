"""The Slurm tests' cluster: one per test session, started on first use, stopped at the end.

Skipped, with the reason, where Slurm or munge is not installed (``.ci/run`` installs them with
``apt-get install -y slurm-wlm munge`` when it runs as root) or where the tests do not run as root.
"""

from __future__ import annotations

import os

import pytest
from slurm_cluster import SlurmCluster, leftover_processes, missing_programs

_started: list[SlurmCluster] = []


def skip_reason() -> str | None:
    missing = missing_programs()
    if missing:
        return (f"Slurm is not installed (missing {', '.join(missing)}): "
                "apt-get install -y slurm-wlm munge (.ci/run does it as root)")
    if os.geteuid() != 0:
        return "the one-node Slurm cluster runs slurmd, which needs root"
    return None


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> SlurmCluster:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    _started.append(cluster)
    yield cluster
    killed = cluster.stop()
    left = leftover_processes(cluster.root)
    assert not killed and not left, f"processes left after the jobs: {killed} {left}"


def pytest_terminal_summary(terminalreporter) -> None:
    for cluster in _started:
        terminalreporter.write_line(f"Slurm test cluster ({cluster.cpus} CPUs): up in {cluster.startup_s:.2f} s")
