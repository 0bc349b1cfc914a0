"""The pipelining API's examples, end to end under the launcher, as the README runs them (few steps)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["--calls", "2", "--steps-per-call", "2"]


def poprun(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_")) or k == "POPRUN_WISDOM"}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "poprun_py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def losses(stdout: str) -> list[float]:
    return [float(x) for x in re.findall(r"host call +\d+: loss ([0-9.]+)", stdout)]


@pytest.mark.slow
def test_pipeline_example_on_two_replicas_of_two_ipus(tmp_path):
    png = tmp_path / "timeline.png"
    out = poprun("--num-replicas", "2", "--ipus-per-replica", "2", "python", "-m", "launch.examples.pipeline_two_ipus",
                 *SHORT, "--timeline-png", str(png)).stdout
    assert "[0] IPU1: FWD.1 FWD.2 FWD.3 FWD.4 RECOMP.1 BWD.1 FWD.5" in out
    assert "[0] IPU2: FWD.1 FWD.2 BWD.1 FWD.3 BWD.2" in out
    assert re.search(r"\[0\] 1 +stage2 .* yes", out)  # the memory fit of the second IPU
    assert len(losses(out)) == 2 and "updates 3-4" in out
    assert re.search(r"validation: loss [0-9.]+, accuracy 0\.\d+ on 2000 images", out)
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_mnist_dense_example_on_one_ipu():
    out = poprun("python", "-m", "launch.examples.mnist_dense", *SHORT).stdout
    first, second = losses(out)
    assert second < first  # 4 updates at learning rate 0.05 from random weights
    assert "validation: loss" in out
