"""16.16 emulation end to end (``ipu.emulate_precision``): resume, instance split, stored widths."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ipu.oracles import is_float16
from tests.launch.train.train_runs import DENSE, KILL_AFTER_45, final_state, losses, ok, train

HALF = [*DENSE, "--set", "ipu.emulate_precision=true", "--set", "ipu.precision='16.16'"]


@pytest.fixture(scope="module")
def uninterrupted_half(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("half")
    proc = train(HALF, run_dir)
    ok(proc)
    assert "Emulating precision 16.16" in proc.stderr
    return run_dir


def test_16_16_checkpoints_hold_float16_weights_and_momentum(uninterrupted_half):
    state = final_state(uninterrupted_half, 50)
    stored = {k: v for k, v in state.items() if k.startswith(("model/", "optim/momentum/"))}
    assert len(stored) >= 4
    for key, value in stored.items():
        assert is_float16(value), key


def test_16_16_kill_and_resume_is_bitwise(uninterrupted_half, tmp_path):
    killed = train(HALF, tmp_path, fault=KILL_AFTER_45)
    assert killed.returncode == -9, killed.stderr[-2000:]
    ok(train([*HALF, "--resume", "auto"], tmp_path))
    want, got = final_state(uninterrupted_half, 50), final_state(tmp_path, 50)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    np.testing.assert_array_equal(losses(tmp_path), losses(uninterrupted_half))


def test_16_16_two_instances_agree_and_match_one_instance(tmp_path):
    # 2 x 1 with a weight checksum every update (a mismatch would fail the run) against 1 x 2
    short = [*HALF, "--set", "data.replicas=2", "--set", "run.max_steps=20", "--set", "run.evaluate=false",
             "--set", "ema.decay=0", "--set", "run.checksum_every=1"]
    ok(train(short, tmp_path / "1x2"))
    ok(train(short, tmp_path / "2x1", instances=2, replicas=2))
    np.testing.assert_allclose(losses(tmp_path / "2x1"), losses(tmp_path / "1x2"), rtol=1e-12)
    want, got = final_state(tmp_path / "1x2"), final_state(tmp_path / "2x1")
    for key in want:
        if key.startswith(("model/", "optim/")):
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
