"""Training runs for the end-to-end tests: ``python -m launch.train`` (alone or under the launcher)
on small shapes with one thread per library, and what their run folders hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from launch.train import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[3]

# 39 updates an epoch: the 50-update runs cross an epoch end (evaluation, checkpoint, EMA).
DENSE = ["--config", "dense", "--set", "model.options={hidden: [32]}", "--set", "data.micro_batch=64",
         "--set", "run.max_steps=50", "--set", "run.checkpoint_every=5", "--set", "run.plots=false",
         "--set", "run.progress_bar=false", "--set", "run.checksum_every=5",
         "--set", "loss_scaling.initial_scale=128", "--set", "ema.decay=0.9"]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items()  # (POPRUN_WISDOM as the tests set it: off, the shape rules)
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_")) or k == "POPRUN_WISDOM"}
    out.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(ROOT), **extra)
    return out


def train(args: list[str], run_dir: Path, instances: int = 0, replicas: int = 4, launcher: list[str] = (),
          fault: str = "", **variables: str):
    """``fault``: a ``POPRUN_FAULT`` for this run (it fires in the first attempt only); ``variables``:
    more environment variables."""
    cmd = [sys.executable, "-m", "launch.train", *args, "--set", f"run.run_dir={run_dir}"]
    if instances:
        cmd = [sys.executable, "-m", "poprun_py", "--num-instances", str(instances), "--num-replicas", str(replicas),
               *launcher, *cmd]
    extra = {"POPRUN_FAULT": fault} if fault else {}
    return subprocess.run(cmd, cwd=ROOT, env=env(**extra, **variables), capture_output=True, text=True, timeout=240)


# Instance 0 dies by SIGKILL, as in a crash, right after weight update 46 (the update after checkpoint 45);
# the resumed run, without the variable, starts from checkpoint 45.
KILL_AFTER_45 = "instance=0,at=step 46,signal=KILL"


def ok(proc) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def losses(run_dir: Path) -> np.ndarray:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if r["event"] == "step"]
    assert [r["step"] for r in steps] == list(range(len(steps)))
    return np.array([r["loss"] for r in steps])


def final_state(run_dir: Path, steps: int = 20) -> dict[str, np.ndarray]:
    arrays, meta = ckpt.load_checkpoint(ckpt.find_latest(run_dir))
    assert meta["step"] == steps
    return arrays


def evaluations(run_dir: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["event"] == "eval"]
