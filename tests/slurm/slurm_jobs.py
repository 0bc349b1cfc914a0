"""Submitting jobs to the test cluster and watching them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from launch.train import checkpoint as ckpt
from tests.slurm.slurm_cluster import SlurmCluster

ROOT = Path(__file__).resolve().parents[2]


def job_env(slurm: SlurmCluster, **extra: str) -> dict[str, str]:
    """What a job submitted by a test sees: this venv first on PATH, one thread per kernel."""
    env = {k: v for k, v in slurm.env().items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "PMIX_")) or k == "POPRUN_WISDOM"}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(extra)
    return env


def submit(slurm: SlurmCluster, *args: str, cwd: Path, **extra: str) -> int:
    """``sbatch`` with the job's output in ``cwd/slurm-<job id>.out``; the job id."""
    proc = subprocess.run(["sbatch", "--parsable", "--output=slurm-%j.out", *args], cwd=cwd,
                          env=job_env(slurm, **extra), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return int(proc.stdout.split(";")[0])


def finish(slurm: SlurmCluster, job: int, cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Wait until the job has ended and its epilog has run: (exit code, 128 + signal; its output).

    Not ``sbatch --wait``: that polls with a growing interval (a 12 s job took 42 s to report)."""
    wait_gone(slurm, job, timeout)
    code, _, sig = job_state(slurm, job)["ExitCode"].partition(":")
    out = cwd / f"slurm-{job}.out"
    return int(code) or (128 + int(sig) if int(sig) else 0), out.read_text() if out.exists() else ""


def sbatch(slurm: SlurmCluster, *args: str, cwd: Path, timeout: float = 240, **extra: str) -> tuple[int, int, str]:
    """Submit and finish: (job id, exit code, its output)."""
    job = submit(slurm, *args, cwd=cwd, **extra)
    return (job, *finish(slurm, job, cwd, timeout))


def job_state(slurm: SlurmCluster, job: int) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, Restarts, ExitCode, ...)."""
    text = slurm.run("scontrol", "show", "job", "--oneliner", str(job)).stdout
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def wait_gone(slurm: SlurmCluster, job: int, timeout: float = 60) -> None:
    """Until the job has left the queue (ended, and its epilog has run: no longer COMPLETING)."""
    slurm.wait(lambda: not slurm.run("squeue", "-h", "-j", str(job)).stdout.strip(), timeout, f"job {job} to end")


# A small dense run (config "dense" with these overrides), 2 instances x 2 replicas: long enough
# (150 updates) that a stop request lands in the middle of it, short enough for the test budget.
DENSE = ["--set", f"data.path={ROOT / 'data' / 'fashion-mnist-subset.h5'}",
         "--set", "model.options={hidden: [32]}", "--set", "run.max_steps=150", "--set", "run.progress_bar=false",
         "--set", "run.plots=false", "--set", "schedule.warmup_steps=5", "--set", "run.checksum_every=50"]
TWO_TASKS = ["-N", "1", "--ntasks-per-node=2", "-c", "1", "--time=10"]


def records(run_dir: Path, event: str) -> list[dict]:
    """The complete ``metrics.jsonl`` lines of one event kind (a line still being written is skipped)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == event:
            found.append(record)
    return found


def losses(run_dir: Path) -> list[float]:
    steps = records(run_dir, "step")
    assert [r["step"] for r in steps] == list(range(len(steps)))
    return [r["loss"] for r in steps]


def final_state(run_dir: Path) -> dict[str, np.ndarray]:
    arrays, meta = ckpt.load_checkpoint(ckpt.find_latest(run_dir))
    assert meta["step"] == 150
    return arrays


def assert_same_run(got: Path, want: Path) -> None:
    """Bitwise the same losses and final state (weights, optimizer, EMA, ...)."""
    assert losses(got) == losses(want)
    a, b = final_state(got), final_state(want)
    assert set(a) == set(b)
    for key in b:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
