"""Preemption: a job told to stop checkpoints at the next update and ends cleanly; requeued, it
resumes from that checkpoint and ends bitwise equal to an uninterrupted run.

``slurm_srun.sh`` as written (its ``#SBATCH --requeue --open-mode=append --signal=B:USR1@120``).
Both tasks wait after update 3 until they are asked to stop (``POPRUN_FAULT``'s ``signal=WAIT``), and say so in
the job's output; then ``scancel --batch --signal=USR1`` reaches srun, which passes SIGUSR1 to both
tasks; the training agrees on the update to stop after, writes the checkpoint and exits 0.
``scontrol requeue`` puts the job back in the queue (Slurm holds a requeued job for two minutes; the
test releases it with ``StartTime=now+1`` once the first run's step daemons are gone), and the
script's ``--resume auto`` continues the run. Every wait is on an event (``SlurmCluster.wait``).
"""

from __future__ import annotations

from launch.train import checkpoint as ckpt
from tests.slurm.events import wait_for_exits
from tests.slurm.slurm_cluster import leftover_processes
from tests.slurm.slurm_jobs import DENSE, ROOT, TWO_TASKS, assert_same_run, finish, job_state, records, submit

WAITING = "poprun_py: injected fault: SIGUSR1 awaited by instance * (pid"


def test_a_stopped_job_checkpoints_and_resumes_bitwise_after_requeue(slurm, launcher_reference, tmp_path):
    run_dir = tmp_path / "run"
    # Both tasks wait after update 3 until SIGUSR1 arrives (POPRUN_FAULT, signal=WAIT), so the request
    # surely lands in update 4; they announce the wait in the job's output (stderr, merged).
    job = submit(slurm, *TWO_TASKS, str(ROOT / "launch" / "jobs" / "slurm_srun.sh"), "dense", *DENSE,
                 "--set", f"run.run_dir={run_dir}", cwd=tmp_path, POPRUN_FAULT="instance=*,at=step 3,signal=WAIT")
    output = tmp_path / f"slurm-{job}.out"
    slurm.wait(lambda: output.exists() and output.read_text().count(WAITING) == 2, 180,
               "both tasks to wait after update 3", tmp_path)
    stop = slurm.run("scancel", "--batch", "--signal=USR1", str(job))  # scancel -> slurmd -> srun -> tasks
    assert stop.returncode == 0, stop.stderr
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
    wait_for_exits([p.pid for p in leftover_processes(slurm.root) if p.name() == "slurmstepd"], 60,
                   "the first run's slurmstepd processes to exit")
    # slurmd revoked the first run's job credential when the job ended, with a timestamp in whole
    # seconds, and refuses a credential created in that same second ("Job N already killed, do not
    # launch batch job": the job then fails with exit code 1). So the job may start from the next
    # second on: Slurm itself waits for that (a begin time in whole seconds, one after now).
    for command in (["requeue", str(job)], ["update", f"JobId={job}", "StartTime=now+1"]):
        done = slurm.run("scontrol", *command)
        assert done.returncode == 0, done.stderr
    code, out = finish(slurm, job, tmp_path)  # the output of both runs: --open-mode=append
    assert code == 0 and job_state(slurm, job)["Restarts"] == "1", out[-4000:] + slurm.log("slurmd")[-3000:]
    assert f"stopped after update {step}" in out and f"Resumed from {run_dir}/checkpoints/ckpt-{step:08d}.h5" in out
    assert_same_run(run_dir, launcher_reference)
