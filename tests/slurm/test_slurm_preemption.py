"""Preemption: a job told to stop checkpoints at the next update and ends cleanly; requeued, it
resumes from that checkpoint and ends bitwise equal to an uninterrupted run.

``slurm_srun.sh`` as written (its ``#SBATCH --requeue --open-mode=append --signal=B:USR1@120``).
Both tasks stop themselves after update 3 (``run.pause_at_step``); then
``scancel --batch --signal=USR1`` reaches srun, which passes SIGUSR1 to both tasks; the training
agrees on the update to stop after, writes the checkpoint and exits 0. ``scontrol requeue`` puts the
job back in the queue (Slurm holds a requeued job for two minutes; the test releases it with
``StartTime=now`` once the first run's step daemons are gone), and the script's ``--resume auto``
continues the run.
"""

from __future__ import annotations

import signal
import time

import psutil

from slurm_cluster import leftover_processes
from slurm_jobs import (DENSE, ROOT, TWO_TASKS, assert_same_run, finish, job_state, records, signal_pending,
                        step_tasks, submit, wait_until)

from launch import checkpoint as ckpt


def stopped_by_signal(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def test_a_stopped_job_checkpoints_and_resumes_bitwise_after_requeue(slurm, launcher_reference, tmp_path):
    run_dir = tmp_path / "run"
    # Both tasks stop themselves after update 3 (run.pause_at_step), so the request surely arrives
    # before update 4; they are let go once it waits on both (scancel -> slurmd -> srun -> tasks).
    job = submit(slurm, *TWO_TASKS, str(ROOT / "launch" / "jobs" / "slurm_srun.sh"), "dense", *DENSE,
                 "--set", f"run.run_dir={run_dir}", "--set", "run.pause_at_step=3", cwd=tmp_path)
    wait_until(lambda: len(step_tasks(slurm, job)) == 2 and all(stopped_by_signal(t) for t in step_tasks(slurm, job)),
               180, "both tasks to stop themselves after update 3")
    tasks = step_tasks(slurm, job)
    stop = slurm.run("scancel", "--batch", "--signal=USR1", str(job))
    assert stop.returncode == 0, stop.stderr
    wait_until(lambda: all(signal_pending(t.pid, signal.SIGUSR1) for t in tasks), 60, "SIGUSR1 to reach both tasks")
    for task in tasks:
        task.resume()
    code, out = finish(slurm, job, tmp_path)
    assert code == 0, out[-4000:] + slurm.log("slurmd")[-3000:]

    stopped = records(run_dir, "stopped")
    assert len(stopped) == 1, out[-3000:]
    step = stopped[0]["step"]
    # Caught on resuming after update 3, the request rides in update 4's all-reduce: the run stops after it.
    assert step == 4 and stopped[0]["signal"] == "SIGUSR1"
    assert ckpt.step_of(ckpt.find_latest(run_dir)) == step
    assert f"SIGUSR1: stopped after update {step} of 150" in out
    assert job_state(slurm, job)["JobState"] == "COMPLETED"

    # Slurm holds a requeued job for 2 minutes, time for the last run's step daemons to go; the test
    # waits for exactly that instead, then releases the job.
    wait_until(lambda: not [p for p in leftover_processes(slurm.root) if p.name() == "slurmstepd"], 60,
               "the first run's slurmstepd processes to exit")
    # slurmd revoked the first run's job credential when the job ended, with a timestamp in whole
    # seconds, and refuses a credential created in that same second ("Job N already killed, do not
    # launch batch job": the job then fails with exit code 1). Relaunch from the next second on.
    ended = time.time()
    wait_until(lambda: int(time.time()) > int(ended), 5, "the second in which the first run ended to pass")
    for command in (["requeue", str(job)], ["update", f"JobId={job}", "StartTime=now"]):
        done = slurm.run("scontrol", *command)
        assert done.returncode == 0, done.stderr
    code, out = finish(slurm, job, tmp_path)  # the output of both runs: --open-mode=append
    assert code == 0 and job_state(slurm, job)["Restarts"] == "1", out[-4000:] + slurm.log("slurmd")[-3000:]
    assert f"stopped after update {step}" in out and f"Resumed from {run_dir}/checkpoints/ckpt-{step:08d}.h5" in out
    assert_same_run(run_dir, launcher_reference)
