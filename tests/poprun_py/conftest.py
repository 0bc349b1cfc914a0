"""Fixtures of the real-host tests (``real_hosts.py``): two hosts, and the single-host reference run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.poprun_py.real_hosts import make_cluster, train_on


@pytest.fixture
def two_hosts(tmp_path):
    """Two real hosts (network namespaces with sshd), gone after the test."""
    yield from make_cluster(tmp_path / "cluster", 2)


@pytest.fixture(scope="session")
def single_host_run(tmp_path_factory) -> Path:
    """The reference: the same training on this host alone, 1 instance x 4 replicas."""
    run_dir = tmp_path_factory.mktemp("single") / "run"
    res = train_on(None, run_dir, instances=1)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir
