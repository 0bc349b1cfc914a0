"""Submitting jobs to the test cluster and watching them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from slurm_cluster import SlurmCluster

ROOT = Path(__file__).resolve().parents[2]


def job_env(slurm: SlurmCluster, **extra: str) -> dict[str, str]:
    """What a job submitted by a test sees: this venv first on PATH, one thread per kernel."""
    env = {k: v for k, v in slurm.env().items() if not k.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "PMIX_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(extra)
    return env


def sbatch(slurm: SlurmCluster, *args: str, cwd: Path, timeout: float = 240, **extra: str) -> tuple[int, int, str]:
    """``sbatch --wait``, then until its epilog has run: (job id, exit code, the job's output)."""
    out = cwd / "slurm-%j.out"
    proc = subprocess.run(["sbatch", "--wait", "--parsable", f"--output={out}", *args], cwd=cwd,
                          env=job_env(slurm, **extra), capture_output=True, text=True, timeout=timeout)
    job = int(proc.stdout.split(";")[0].split()[0]) if proc.stdout.strip() else -1
    if job > 0:
        wait_gone(slurm, job)
    text = (cwd / f"slurm-{job}.out").read_text() if job > 0 and (cwd / f"slurm-{job}.out").exists() else ""
    return job, proc.returncode, text + proc.stderr


def wait_until(ready, timeout: float, what: str) -> None:
    """Check ``ready()`` every 0.2 s until it holds; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.2)


def job_state(slurm: SlurmCluster, job: int) -> dict[str, str]:
    """``scontrol show job`` as a dict (JobState, Restarts, ExitCode, ...)."""
    text = slurm.run("scontrol", "show", "job", "--oneliner", str(job)).stdout
    return dict(field.split("=", 1) for field in text.split() if "=" in field)


def wait_gone(slurm: SlurmCluster, job: int, timeout: float = 60) -> None:
    """Until the job has left the queue (ended, and its epilog has run: no longer COMPLETING)."""
    wait_until(lambda: not slurm.run("squeue", "-h", "-j", str(job)).stdout.strip(), timeout, f"job {job} to end")
