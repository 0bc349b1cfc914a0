"""Elastic restarts on real hosts: a host lost mid-run, the job goes on with the hosts that answer,
with the same replicas over fewer instances, and ends bitwise where the uninterrupted run ends."""

from __future__ import annotations

import json

from tests.poprun_py.real_hosts import (
    RunningJob,
    assert_bitwise_equal,
    assert_nothing_left,
    make_cluster,
    pytestmark_real,

)

pytestmark = pytestmark_real




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


def test_four_hosts_lose_one_and_go_on_with_two_bitwise(single_host_run, tmp_path):
    """4 x 1 replica; host 3 dies; 4 replicas do not divide over 3 instances, so the job goes on with
    2 of the 3 hosts that answer, 2 replicas each."""
    for cluster in make_cluster(tmp_path / "cluster", 4):
        run_dir = tmp_path / "run"
        job = RunningJob(cluster, run_dir, instances=4,
                         options=("--min-instances", "2", "--max-restarts", "1"),
                         fault="instance=3,at=step 3,signal=STOP")
        job.wait_for_line("injected fault")
        cluster.kill_host(3)
        _, said = job.wait_for_line(f"host {cluster.addresses[3]} lost")
        assert "going on with 2 hosts" in said and "2 instances x 2 local replicas, the same 4 replicas" in said
        assert job.finish() == 0, job.stderr[-4000:]
        assert_bitwise_equal(run_dir, single_host_run)
        second = json.loads((run_dir / "logs" / "run.json").read_text())["attempts"][1]
        assert second["hosts"] == cluster.addresses[:2] and second["local_replicas"] == 2
        assert_nothing_left(cluster, run_dir)


def test_too_few_hosts_left_stops_the_job_saying_why(two_hosts, tmp_path):
    run_dir = tmp_path / "run"
    job = RunningJob(two_hosts, run_dir, instances=2, options=("--min-instances", "2", "--max-restarts", "1"),
                     fault="instance=1,at=step 3,signal=STOP")
    job.wait_for_line("injected fault")
    two_hosts.kill_host(1)
    _, said = job.wait_for_line(f"host {two_hosts.addresses[1]} lost")
    assert job.finish() != 0
    assert "the 4 replicas cannot be placed on the 1 host that answers (" in said
    assert "fewer than --min-instances 2" in said and said.rstrip().endswith("stopping")
    attempts = json.loads((run_dir / "logs" / "run.json").read_text())["attempts"]
    assert len(attempts) == 1 and list(attempts[0]["lost_hosts"]) == [two_hosts.addresses[1]]
    assert_nothing_left(two_hosts, run_dir)


def test_without_min_instances_a_lost_host_stops_the_job_in_one_line_naming_it(two_hosts, tmp_path):
    """No --min-instances: the restart goes to the lost host too, whose ssh refuses; the job stops with
    one line naming the host and ssh's reason, not only MPI's own lines (found by bench/chaos_hosts.py)."""
    run_dir = tmp_path / "run"
    job = RunningJob(two_hosts, run_dir, instances=2, options=("--max-restarts", "1"),
                     fault="instance=1,at=step 3,signal=STOP")
    job.wait_for_line("injected fault")
    two_hosts.kill_host(1)
    assert job.finish() == 255, job.stderr[-4000:]
    last = [line for line in job.stderr.splitlines() if line.startswith("poprun_py:")][-1]
    host = two_hosts.addresses[1]
    assert last.startswith("poprun_py: mpiexec ended with status 255 before every instance reported its end: "
                           f"host {host}: unreachable: ssh: connect to host {host} port 22: Connection refused; "), last
    assert job.stderr.rstrip().endswith(last)  # the last word, and one line
    attempts = json.loads((run_dir / "logs" / "run.json").read_text())["attempts"]
    assert [a["reason"] for a in attempts] == ["mpi", "mpi"]
    assert_nothing_left(two_hosts, run_dir)
