"""Host-level faults on real hosts (network namespaces reached over ssh): a link cut (a partition),
a slow and lossy link, a full file system under the run directory. Each job either recovers
bitwise or stops with one message that names the host and the cause, within a stated bound, and
leaves no process on any host, nothing in any host's /dev/shm and no half-written checkpoint."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from poprun_py.fence import fence_after
from tests.poprun_py.host_jobs import fill, program_on
from tests.poprun_py.real_hosts import (
    RunningJob,
    assert_bitwise_equal,
    assert_nothing_left,
    chaos,
    make_cluster,
    pytestmark_real,
    train_on,
)

pytestmark = pytestmark_real
HANG_S = 6.0




def test_a_host_cut_off_is_left_behind_and_stops_itself(two_hosts, single_host_run, tmp_path):
    """The link of host 1 goes down mid-run: the launcher sees no progress for --hang-timeout, stops
    what it can reach, finds host 1 unreachable and goes on with host 0 alone, bitwise; host 1's
    instance, which nobody can reach, stops itself (poprun_py.fence) while its link is still down."""
    run_dir = tmp_path / "run"
    job = RunningJob(two_hosts, run_dir, instances=2, fault="instance=1,at=step 3,signal=STOP",
                     options=("--min-instances", "1", "--max-restarts", "1", "--hang-timeout", f"{HANG_S:g}"))
    job.wait_for_line("injected fault")
    program = program_on(two_hosts, 1)
    two_hosts.cut_link(1)
    cut = time.monotonic()
    program.resume()  # on into the next all-reduce, which cannot reach host 0 any more
    hang_seen, _ = job.wait_for_line("no progress for")
    lost_seen, lost = job.wait_for_line(f"host {two_hosts.addresses[1]} lost")
    assert "Connection timed out" in lost or "no answer" in lost, lost
    assert hang_seen - cut < HANG_S + 5.0  # the launcher's bound: --hang-timeout after the last progress
    code = job.finish()
    assert code == 0, job.stderr[-4000:]
    assert_bitwise_equal(run_dir, single_host_run)
    attempts = json.loads((run_dir / "logs" / "run.json").read_text())["attempts"]
    assert [a["reason"] for a in attempts] == ["hang", "ok"] and attempts[1]["hosts"] == two_hosts.addresses[:1]
    # host 1, still cut off, stops its own part of the job 2 x --hang-timeout + 10 s after its last
    # progress (poprun_py.fence); 10 s more for a loaded machine
    bound = fence_after(HANG_S) + 10.0
    _, alive = psutil.wait_procs(two_hosts.job_processes(1), timeout=max(1.0, cut + bound - time.monotonic()))
    assert not alive, f"left on the cut-off host {bound:g} s after the cut: {[p.cmdline() for p in alive]}"
    print(f"\nhang seen {hang_seen - cut:.1f} s after the cut, host lost {lost_seen - cut:.1f} s, "
          f"host 1 empty {time.monotonic() - cut:.1f} s")
    assert "out of the launcher's reach: it made no progress for 22 s" in _log(run_dir, 0, 1)
    two_hosts.cut_link(1, up=True)
    assert_nothing_left(two_hosts, run_dir)


def _log(run_dir: Path, attempt: int, instance: int) -> str:
    return (run_dir / "logs" / f"attempt_{attempt}" / f"instance_{instance}" / "stderr.log").read_text()


@pytest.mark.parametrize("qdisc", [
    ["netem", "delay", "20ms", "loss", "5%"],  # kernels built without sch_netem refuse it: skipped there
    ["tbf", "rate", "4mbit", "burst", "16kb", "latency", "400ms"],  # a slow link (500 KB/s)
], ids=["netem-delay-and-loss", "tbf-slow-link"])
def test_a_slow_or_lossy_link_costs_time_never_a_bit(two_hosts, single_host_run, tmp_path, qdisc):
    """Host 1's link delays and drops packets (TCP retransmits them), or carries 4 Mbit/s: the job ends
    bitwise like one host; bound: --hang-timeout 60 s between two progress reports."""
    refused = two_hosts.shape_link(1, qdisc)
    if refused:
        pytest.skip(f"this kernel has no {qdisc[0]} queueing discipline ({refused})")
    run_dir = tmp_path / "run"
    started = time.monotonic()
    res = train_on(two_hosts, run_dir, instances=2, options=("--hang-timeout", "60"), timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_bitwise_equal(run_dir, single_host_run)
    print(f"\n{time.monotonic() - started:.1f} s with {' '.join(qdisc)} on one link")
    assert_nothing_left(two_hosts, run_dir)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs for the run directory, mounted before the hosts exist (they see it too)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "poprun_small_disk", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_full_disk_stops_the_job_naming_the_host_and_keeps_the_checkpoints(small_disk, tmp_path):
    """The run directory's file system fills up after checkpoint 2: the next checkpoint cannot be
    written, and the job stops at once with one report naming the instance, its host and ENOSPC;
    checkpoint 2 is intact and no temporary file is left."""
    for cluster in make_cluster(tmp_path / "cluster", 2):
        run_dir = small_disk / "run"
        job = RunningJob(cluster, run_dir, instances=2, options=("--log-dir", str(tmp_path / "logs")),
                         fault="instance=0,at=checkpoint 4: writing,signal=STOP")
        job.wait_for_line("injected fault")
        fill(small_disk)
        program_on(cluster, 0).resume()
        code = job.finish(timeout=120)
        assert code == 1, job.stderr[-3000:]
        report = job.stderr[job.stderr.index("poprun_py: instance 0 of 2 failed"):]
        assert report.startswith("poprun_py: instance 0 of 2 failed (host h0, pid ")
        assert "its error: in the output above" in report  # said once, where the instance said it
        said = job.stderr[:job.stderr.index("poprun_py: instance 0 of 2 failed")]
        assert said.count("No space left on device") == 1 and "[0] [0/2] ERROR launch.train: OSError" in said
        assert "free space on the file system of" in said and "Traceback" not in said
        assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["ckpt-00000002.h5"]
        assert chaos.ckpt.load_checkpoint(run_dir / "checkpoints" / "ckpt-00000002.h5")[1]["step"] == 2
        assert_nothing_left(cluster, run_dir)
