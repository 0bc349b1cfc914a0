"""Shared pieces of the real-host tests: the cluster fixture, training runs on it, and the checks
that a job left nothing behind on any host."""

from __future__ import annotations

import importlib.util
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

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


class RunningJob:
    """A training job started in the background, whose stderr the test can wait on line by line."""

    def __init__(self, cluster: NetnsCluster, run_dir: Path, *, instances: int, replicas: int = 4,
                 options: tuple[str, ...] = (), fault: str = "") -> None:
        env = launcher_env(**THREADS, **({"POPRUN_FAULT": fault} if fault else {}))
        self.proc = subprocess.Popen(_train_argv(cluster, run_dir, instances, replicas, options), cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.err: list[str] = []
        self.out = ""
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for_line(self, text: str, timeout: float = 120.0) -> tuple[float, str]:
        """Block until a stderr line contains ``text``: when it was read (monotonic), and the line."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {timeout:g} s:\n{''.join(self.err[-40:])}")
            if line is None:
                raise AssertionError(f"the job ended before a line with {text!r}:\n{''.join(self.err[-40:])}")
            if text in line:
                return time.monotonic(), line

    def finish(self, timeout: float = 300.0) -> int:
        self.out = self.proc.stdout.read()
        code = self.proc.wait(timeout=timeout)
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.err)


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
    for k in range(cluster.count):
        procs = cluster.job_processes(k)
        _, alive = psutil.wait_procs(procs, timeout=10)
        assert not alive, f"left running on host {cluster.names[k]}: {[(p.pid, p.cmdline()) for p in alive]}"
        left = cluster.shm_files(k)
        assert left == [], f"left in /dev/shm of host {cluster.names[k]}: {left}"
    if run_dir is not None:
        partial = list((run_dir / "checkpoints").glob("*.tmp"))
        assert not partial, f"half-written checkpoints left: {partial}"
