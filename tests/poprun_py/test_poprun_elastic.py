"""Elastic restarts on real hosts: a host lost mid-run, the job goes on with the hosts that answer,
with the same replicas over fewer instances, and ends bitwise where the uninterrupted run ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.poprun_py.real_hosts import (
    RunningJob,
    assert_bitwise_equal,
    assert_nothing_left,
    make_cluster,
    pytestmark_real,
    train_on,
)

pytestmark = pytestmark_real


@pytest.fixture(scope="module")
def single_host_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    res = train_on(None, run_dir, instances=1)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir


@pytest.fixture
def two_hosts(tmp_path):
    yield from make_cluster(tmp_path / "cluster", 2)


def test_a_host_killed_mid_run_the_job_goes_on_with_the_other_bitwise(two_hosts, single_host_run, tmp_path):
    run_dir = tmp_path / "run"
    job = RunningJob(two_hosts, run_dir, instances=2, options=("--min-instances", "1", "--max-restarts", "2"),
                     fault="instance=1,at=step 3,signal=STOP")
    job.wait_for_line("injected fault")
    two_hosts.kill_host(1)
    code = job.finish()
    assert code == 0, job.stderr[-4000:]
    assert_bitwise_equal(run_dir, single_host_run)
    record = json.loads((run_dir / "logs" / "run.json").read_text())
    first, second = record["attempts"]
    assert first["hosts"] == two_hosts.addresses and list(first["lost_hosts"]) == [two_hosts.addresses[1]]
    assert second["hosts"] == two_hosts.addresses[:1] and second["num_instances"] == 1
    assert second["local_replicas"] == 4 and second["reason"] == "ok"
    assert_nothing_left(two_hosts, run_dir)
