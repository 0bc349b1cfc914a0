"""The commands are immune to a user's own ``models/``, ``data/``, ``launch/``, ``ipu/`` or ``jit/``
package in the working directory: ``poprun-train`` alone and ``poprun_py ... python -m launch.train``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
SHORT = ["--config", "dense", "--set", "model.options={hidden: [16]}", "--set", "run.max_steps=3",
         "--set", "run.evaluate=false", "--set", "run.plots=false", "--set", "run.progress_bar=false",
         "--set", "schedule.warmup_steps=1"]


@pytest.fixture
def foreign_dir(tmp_path) -> Path:
    """A project folder whose own top-level packages share our names and fail when imported."""
    for name in ("models", "data", "launch", "ipu", "jit"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the working directory\\'s {name} was imported')\n")
    return tmp_path


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_")) or k == "POPRUN_WISDOM"}
    env.pop("PYTHONPATH", None)  # only the installed distribution
    env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _steps(run_dir: Path) -> list[int]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if r["event"] == "step"]


@pytest.mark.parametrize("how", ["console script", "under poprun_py"])
def test_training_runs_from_a_folder_with_its_own_models_and_data_packages(foreign_dir, how):
    if not (BIN / "poprun-train").exists():
        pytest.skip("the console scripts are not installed (pip install -e .)")
    run_dir = foreign_dir / "run"
    cmd = [str(BIN / "poprun-train"), *SHORT, "--set", f"run.run_dir={run_dir}"]
    if how == "under poprun_py":
        cmd = [str(BIN / "poprun_py"), "--num-instances", "1", "--num-replicas", "4", "python", "-m", "launch.train",
               *cmd[1:]]
    proc = _run(cmd, foreign_dir)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert _steps(run_dir) == [0, 1, 2]
