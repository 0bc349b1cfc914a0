"""The test cluster itself: it stops by pid, with its jobs, and leaves nothing running."""

from __future__ import annotations

import shutil
import tempfile

import psutil
import pytest
from slurm_cluster import SlurmCluster, leftover_processes, skip_reason
from slurm_jobs import job_state, submit, wait_until


def test_a_cluster_with_a_running_job_stops_leaving_nothing(tmp_path):
    if skip_reason():
        pytest.skip(skip_reason())
    cluster = SlurmCluster(tempfile.mkdtemp(prefix="slurm-")).start()
    try:
        daemons = [p.pid for p in cluster.procs.values()]
        job = submit(cluster, "-n", "2", "--wrap", "srun -n 2 sleep 600", cwd=tmp_path)
        wait_until(lambda: sum(p.name() == "sleep" for p in leftover_processes(cluster.root)) == 2, 60,
                   "both tasks of the step to start")
        assert job_state(cluster, job)["JobState"] == "RUNNING"
        steps = [p for p in leftover_processes(cluster.root) if p.name() == "slurmstepd"]
        assert len(steps) == 2  # the batch step and step 0
    finally:
        cluster.stop()
    assert leftover_processes(cluster.root) == []
    assert not [pid for pid in daemons if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    shutil.rmtree(cluster.root)
