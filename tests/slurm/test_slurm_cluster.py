"""The test cluster itself: it stops by pid, with its jobs, and leaves nothing running."""

from __future__ import annotations

import shutil
import tempfile

import psutil
import pytest

from tests.slurm.slurm_cluster import SlurmCluster, leftover_processes, skip_reason
from tests.slurm.slurm_jobs import job_state, submit


def test_a_cluster_with_a_running_job_stops_leaving_nothing(tmp_path):
    if skip_reason():
        pytest.skip(skip_reason())
    cluster = SlurmCluster(tempfile.mkdtemp(prefix="slurm-")).start()
    try:
        daemons = [p.pid for p in cluster.procs.values()]
        # Each task says it has started (its line in tasks.txt), then becomes `sleep`.
        job = submit(cluster, "-n", "2", "--wrap", "srun -n 2 sh -c 'echo up >> tasks.txt; exec sleep 600'",
                     cwd=tmp_path)
        tasks = tmp_path / "tasks.txt"
        cluster.wait(lambda: tasks.exists() and tasks.read_text().count("up") == 2, 60, "both tasks of the step to start",
                     tmp_path)
        assert job_state(cluster, job)["JobState"] == "RUNNING"
        steps = [p for p in leftover_processes(cluster.root) if p.name() == "slurmstepd"]
        assert len(steps) == 2  # the batch step and step 0
    finally:
        cluster.stop()
    assert leftover_processes(cluster.root) == []
    assert not [pid for pid in daemons if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    shutil.rmtree(cluster.root)
