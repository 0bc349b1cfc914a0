"""Faults injected into real training jobs under the launcher: each job ends bitwise where an
uninterrupted run ends. The same harness as ``bench/chaos.py`` (which runs 10 or more jobs),
with three fixed faults: a SIGKILL while a checkpoint is written, a SIGSTOP (a hang that
``--hang-timeout`` catches) and a SIGKILL between checkpoints."""

import importlib.util
import signal
import sys
from pathlib import Path

import pytest

from poprun_py.faults import Fault

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("chaos", ROOT / "bench" / "chaos.py")
chaos = sys.modules.setdefault("chaos", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(chaos)

pytestmark = [pytest.mark.chaos, pytest.mark.slow]
STEPS, EVERY = 6, 2


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    result = chaos.run_job(run_dir, None, steps=STEPS, every=EVERY, hang_timeout=None)
    assert result.returncode == 0, result.output_tail
    assert result.reasons == ["ok"]
    return run_dir


@pytest.mark.parametrize("fault,hang_timeout,first_end,resumed_from", [
    (Fault(0, "checkpoint 4: renaming", signal.SIGKILL), None, "failed", 2),
    (Fault(1, "step 3", signal.SIGSTOP), 12.0, "hang", 2),
    (Fault(1, "step 5", signal.SIGKILL), None, "failed", 4),
], ids=["sigkill-in-checkpoint-write", "sigstop-hang", "sigkill-between-checkpoints"])
def test_the_job_recovers_bitwise(baseline, tmp_path, fault, hang_timeout, first_end, resumed_from):
    run_dir = tmp_path / "run"
    result = chaos.run_job(run_dir, fault, steps=STEPS, every=EVERY, hang_timeout=hang_timeout)
    chaos.check(result, run_dir, baseline, STEPS)
    assert not result.problems, f"{result.problems}\n{result.output_tail}"
    assert result.reasons[0] == first_end and result.reasons[-1] == "ok"
    resumed = (run_dir / "logs" / "attempt_1" / "instance_0" / "stderr.log").read_text()
    assert f"Resumed from {run_dir}/checkpoints/ckpt-{resumed_from:08d}.h5" in resumed
    assert result.recovery_s is not None and result.recovery_s > 0
