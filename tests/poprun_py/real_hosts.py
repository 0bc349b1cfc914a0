"""Shared pieces of the real-host tests: the cluster fixture, training runs on it, and the checks
that a job left nothing behind on any host."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.poprun_py.host_jobs import BackgroundJob, leftovers
from tests.poprun_py.launcher_helpers import ROOT, launcher_env
from tests.poprun_py.netns_cluster import NetnsCluster, why_unavailable

_spec = importlib.util.spec_from_file_location("chaos", os.path.join(ROOT, "bench", "chaos.py"))
chaos = sys.modules.setdefault("chaos", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(chaos)

UNAVAILABLE = why_unavailable()
pytestmark_real = [pytest.mark.multihost, pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")]

STEPS, EVERY = 8, 2  # a small dense model: 8 weight updates, a checkpoint every 2
THREADS = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def make_cluster(folder: Path, count: int):
    """A context-managed cluster whose tear-down is checked: nothing of it may be left."""
    cluster = NetnsCluster(folder, count)
    try:
        yield cluster
    finally:
        cluster.close()
        assert not cluster.leftovers(), f"the cluster's tear-down left {cluster.leftovers()}"


def _train_argv(cluster: NetnsCluster | None, run_dir: Path, instances: int, replicas: int,
                options: tuple[str, ...]) -> list[str]:
    where = cluster.launcher_options() if cluster else []
    logs = [] if "--log-dir" in options else ["--log-dir", str(run_dir / "logs")]
    return [sys.executable, "-m", "poprun_py", *where, "--num-instances", str(instances), "--num-replicas",
            str(replicas), *logs, *options,
            sys.executable, "-m", "launch.train", *chaos.train_args(STEPS, EVERY), "--set", f"run.run_dir={run_dir}"]


def train_on(cluster: NetnsCluster | None, run_dir: Path, *, instances: int, replicas: int = 4,
             options: tuple[str, ...] = (), fault: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """The dense training job under the launcher, on ``cluster``'s hosts (None: this host only)."""
    env = launcher_env(**THREADS, **({"POPRUN_FAULT": fault} if fault else {}))
    return subprocess.run(_train_argv(cluster, run_dir, instances, replicas, options), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


class RunningJob(BackgroundJob):
    """A training job started in the background, whose stderr the test can wait on line by line."""

    def __init__(self, cluster: NetnsCluster, run_dir: Path, *, instances: int, replicas: int = 4,
                 options: tuple[str, ...] = (), fault: str = "") -> None:
        env = launcher_env(**THREADS, **({"POPRUN_FAULT": fault} if fault else {}))
        super().__init__(_train_argv(cluster, run_dir, instances, replicas, options), cwd=ROOT, env=env)


def assert_bitwise_equal(run_dir: Path, baseline: Path) -> None:
    """The final checkpoint's arrays and the per-update losses are the baseline's, bit for bit."""
    got, step, losses = chaos.final_state(run_dir)
    want, _, want_losses = chaos.final_state(baseline)
    assert step == STEPS
    assert set(got) == set(want)
    differ = [k for k in want if not np.array_equal(got[k], want[k])]
    assert not differ, f"{len(differ)} arrays differ from the single-host run, e.g. {differ[:3]}"
    assert losses.shape == want_losses.shape and np.array_equal(losses, want_losses), (
        f"per-update losses {losses.tolist()} differ from the single-host run's {want_losses.tolist()}")


def assert_nothing_left(cluster: NetnsCluster, run_dir: Path | None = None) -> None:
    """No job process on any host, nothing in any host's /dev/shm, no half-written checkpoint."""
    left = leftovers(cluster, run_dir)
    assert not left, f"the job left: {left}"
