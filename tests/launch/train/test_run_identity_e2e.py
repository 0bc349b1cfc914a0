"""One run per run directory, end to end: a second run refuses a used folder, a mismatched resume
refuses naming the keys, a restarted job resumes its own checkpoint (not an older run's), Ctrl-C
stops with a checkpoint and exit 130, and ``run.max_steps`` is a stop that leaves the schedule alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launch.train import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[3]
DENSE = ["--config", "dense", "--set", "model.options={hidden: [32]}", "--set", "run.checkpoint_every=20",
         "--set", "run.max_steps=60", "--set", "run.progress_bar=false", "--set", "run.plots=false",
         "--set", "run.tensorboard=false"]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_")) or k == "POPRUN_WISDOM"}
    out.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONPATH=str(ROOT), **extra)
    return out


def train(args: list[str], cwd: Path, launcher: list[str] = (), **extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "launch.train", *args]
    if launcher:
        cmd = [sys.executable, "-m", "poprun_py", *launcher, *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env(**extra), capture_output=True, text=True, timeout=240)


def ok(proc) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def test_a_second_run_into_a_used_folder_refuses_and_leaves_it_as_it_was(tmp_path):
    ok(train([*DENSE, "--set", "run.max_steps=20", "--set", "run.run_dir=mix"], tmp_path))
    before = {p.name: p.read_bytes() for p in (tmp_path / "mix").iterdir() if p.is_file()}
    proc = train([*DENSE, "--set", "run.max_steps=20", "--set", "run.run_dir=mix", "--set", "schedule.base_lr=0.01"],
                 tmp_path)
    assert proc.returncode == 2
    run_id = json.loads(before["identity.json"])["run_id"]
    assert (f"RunDirError: run.run_dir mix holds run {run_id}, newest checkpoint ckpt-00000020.h5: this run would mix "
            "its files with them. Continue that run with --resume auto") in proc.stderr
    assert "Traceback" not in proc.stderr
    after = {p.name: p.read_bytes() for p in (tmp_path / "mix").iterdir() if p.is_file()}
    assert after == before
    resumed = train([*DENSE, "--set", "run.max_steps=20", "--set", "run.run_dir=mix", "--set", "schedule.base_lr=0.01",
                     "--resume", "auto"], tmp_path)
    assert resumed.returncode == 2
    assert "mix/identity.json belongs to a run with another configuration (schedule.base_lr: 0.05 -> 0.01)" \
        in resumed.stderr
    # the same run, longer: its own checkpoint, and a summary with numbers
    longer = ok(train([*DENSE, "--set", "run.max_steps=40", "--set", "run.run_dir=mix", "--resume", "auto"], tmp_path))
    assert f"Resumed from mix/checkpoints/ckpt-00000020.h5: update 20, epoch 0, batch 20 of the epoch (run {run_id})" \
        in longer
    assert summary(tmp_path / "mix")["updates_this_run"] == 20 and summary(tmp_path / "mix")["updates"] == 40
    done = ok(train([*DENSE, "--set", "run.max_steps=40", "--set", "run.run_dir=mix", "--resume", "auto"], tmp_path))
    assert f"Run {run_id} in mix has done its 40 updates already" in done and "val_accuracy" not in done


def test_a_restarted_job_resumes_its_own_checkpoint_not_an_older_runs(tmp_path):
    """The scenario that once resumed another run's weights and exited 0 with nan: an older run
    in the same place with another learning rate, then a job whose instance 1 is killed at update
    25 and restarted by the launcher."""
    numbered = ["--set", "run.run_dir=runs/mix/{n}"]
    launcher = ["--num-instances", "2", "--num-replicas", "4"]
    ok(train([*DENSE, *numbered, "--set", "schedule.base_lr=0.05"], tmp_path, launcher))
    older = {p.name for p in (tmp_path / "runs/mix/1/checkpoints").iterdir()}
    out = ok(train([*DENSE, *numbered, "--set", "schedule.base_lr=0.01"], tmp_path, [*launcher, "--max-restarts", "1"],
                   POPRUN_FAULT="instance=1,at=step 25,signal=KILL"))
    assert "restarting the job (1 of 1)" in out
    assert "from runs/mix/2/checkpoints/ckpt-00000020.h5: update 20" in out
    ok(train([*DENSE, *numbered, "--set", "schedule.base_lr=0.01"], tmp_path, launcher))  # the same, uninterrupted
    restarted, clean, first = (summary(tmp_path / f"runs/mix/{n}") for n in (2, 3, 1))
    assert restarted["updates"] == 60 and restarted["updates_this_run"] == 40
    assert (restarted["val_loss"], restarted["val_accuracy"]) == (clean["val_loss"], clean["val_accuracy"])
    assert restarted["val_accuracy"] != first["val_accuracy"]
    assert {p.name for p in (tmp_path / "runs/mix/1/checkpoints").iterdir()} == older  # untouched


def test_ctrl_c_stops_after_the_update_with_a_checkpoint_and_exit_130(tmp_path):
    cmd = [sys.executable, "-m", "launch.train", *DENSE, "--set", "run.checkpoint_every=5", "--set", "run.run_dir=r"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "Checkpoint for update 5 written" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    lines = [x for x in err.splitlines() if "SIGINT" in x]
    assert len(lines) == 1 and "with a checkpoint in r/checkpoints; continue with --resume auto" in lines[0]
    step = int(lines[0].split("stopped after update ")[1].split()[0])
    assert 5 <= step < 60 and ckpt.step_of(ckpt.find_latest(tmp_path / "r")) == step


def test_max_steps_stops_the_default_run_early_and_warmup_steps_alone_replaces_warmup_epochs(tmp_path):
    """The default config warms up over its first epoch (156 updates): 20 updates stop inside the
    warmup, which the schedule keeps; and --set schedule.warmup_steps=5 replaces warmup_epochs."""
    quick = ["--set", "run.max_steps=20", "--set", "run.progress_bar=false", "--set", "run.plots=false"]
    out = ok(train([*quick, "--set", "run.run_dir=a"], tmp_path))
    assert "20 updates (156 per epoch" in out
    lrs = [r["lr"] for r in map(json.loads, (tmp_path / "a/metrics.jsonl").read_text().splitlines())
           if r["event"] == "step"]
    assert lrs[1] == pytest.approx(0.5 * 1 / 156)  # the warmup of the 15-epoch schedule, not of 20 updates
    assert summary(tmp_path / "a")["val_accuracy"] > 0.2  # ten classes: it learned something
    ok(train([*quick, "--set", "run.run_dir=b", "--set", "schedule.warmup_steps=5"], tmp_path))
    lrs = [r["lr"] for r in map(json.loads, (tmp_path / "b/metrics.jsonl").read_text().splitlines())
           if r["event"] == "step"]
    assert lrs[5] == pytest.approx(0.5, rel=1e-3)


def test_ctrl_c_to_the_launcher_reaches_training_as_ctrl_c(tmp_path):
    """The launcher passes a Ctrl-C on as SIGINT (not SIGTERM): every instance stops after the same
    update, instance 0 writes the checkpoint once, and the job exits 130."""
    cmd = [sys.executable, "-m", "poprun_py", "--num-instances", "2", "--num-replicas", "4", sys.executable, "-m",
           "launch.train", *DENSE, "--set", "run.checkpoint_every=5", "--set", "run.max_steps=0", "--set", "run.run_dir=r"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "Checkpoint for update 5 written" in line:
            break
    proc.send_signal(signal.SIGINT)
    out = "".join(seen) + proc.communicate(timeout=240)[0]
    assert proc.returncode == 130, out[-3000:]
    stopped = [x for x in out.splitlines() if "SIGINT: stopped after update" in x]
    assert len(stopped) == 1 and stopped[0].startswith("[0] "), out[-3000:]
    step = int(stopped[0].split("stopped after update ")[1].split()[0])
    assert ckpt.step_of(ckpt.find_latest(tmp_path / "r")) == step
    assert out.count(f"Checkpoint for update {step} written") == 1
    assert "Traceback" not in out


def test_two_jobs_started_together_into_one_folder_one_runs_the_other_is_refused_once(tmp_path):
    """The issue's repro: two 2-instance jobs into the same plain run.run_dir at once. One trains its 40 updates
    alone (one summary in metrics.jsonl); the other exits 2 with the refusal said once, not per instance."""
    cmd = [sys.executable, "-m", "poprun_py", "--num-instances", "2", "--num-replicas", "4", sys.executable, "-m",
           "launch.train", *DENSE, "--set", "run.max_steps=40", "--set", "run.run_dir=same"]
    jobs = [subprocess.Popen(cmd, cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    ends = sorted((job.wait(240), *job.communicate()) for job in jobs)
    assert [code for code, _, _ in ends] == [0, 2], ends
    refusal = ends[1][2]
    assert refusal.count("RunDirError: run.run_dir same ") == 1, refusal
    lines = [json.loads(x) for x in (tmp_path / "same" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["event"] == "step"] == list(range(40))
    assert [r["event"] for r in lines].count("summary") == 1


def test_a_config_error_every_instance_gives_alike_is_said_once_in_mpi_mode(tmp_path):
    """``mpiexec -n 4 poprun_py poprun-train --set <typo>``: every rank reads the same flags, so the error is one
    line from instance 0, not one per rank, and every rank stops (none waits in a collective)."""
    from poprun_py.mpi_command import find_mpiexec

    cmd = [find_mpiexec(None), "-n", "4", sys.executable, "-m", "poprun_py", "--num-replicas", "4",
           sys.executable, "-m", "launch.train", "--config", "dense", "--set", "optim.momentun=0.9"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert out.count("optim.momentun: unknown key; did you mean optim.momentum?") == 1, out
    assert "[0/4] ERROR" in out
