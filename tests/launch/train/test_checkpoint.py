"""Checkpoint files: round trip, atomic replacement, pruning, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from launch.train import checkpoint as ckpt


def arrays(value: float) -> dict[str, np.ndarray]:
    return {"model/features.0.weight": np.full((2, 3), value, np.float32),
            "optim/momentum/features.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3) * value,
            "replica/1/features.0.running_mean": np.array([value, -value], np.float32),
            "replica/1/features.0.num_batches_tracked": np.array(7, np.int64)}


def test_round_trip_keeps_arrays_bitwise_and_meta(tmp_path):
    meta = {"epoch": 3, "loader": {"epoch": 3, "step": 5}, "loss_scaler": {"scale": 128.0}, "config": {"a": [1, 2]}}
    path = ckpt.save_checkpoint(tmp_path, 12, arrays(0.1), meta)
    assert path == tmp_path / "checkpoints" / "ckpt-00000012.h5"
    got, got_meta = ckpt.load_checkpoint(path)
    assert set(got) == set(arrays(0.1))
    for key, value in arrays(0.1).items():
        assert got[key].dtype == value.dtype
        np.testing.assert_array_equal(got[key], value)
    assert got_meta["step"] == 12 and got_meta["loader"] == {"epoch": 3, "step": 5}
    assert got_meta["config"] == {"a": [1, 2]}
    assert ckpt.split_prefix(got, "replica/1") == {"features.0.running_mean": got["replica/1/features.0.running_mean"],
                                                   "features.0.num_batches_tracked": got["replica/1/features.0.num_batches_tracked"]}


def test_a_crash_after_the_temporary_file_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    first = ckpt.save_checkpoint(tmp_path, 5, arrays(1.0), {"epoch": 0})

    def crash(tmp):
        assert tmp.exists() and tmp.stat().st_size > 0  # the new file was fully written
        raise KeyboardInterrupt("simulated crash between write and rename")

    monkeypatch.setattr(ckpt, "_before_rename", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, 10, arrays(2.0), {"epoch": 1})
    assert ckpt.find_latest(tmp_path) == first
    got, meta = ckpt.load_checkpoint(first)
    np.testing.assert_array_equal(got["model/features.0.weight"], arrays(1.0)["model/features.0.weight"])
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["ckpt-00000005.h5"]


def test_a_torn_temporary_file_is_never_picked(tmp_path):
    ckpt.save_checkpoint(tmp_path, 5, arrays(1.0), {})
    (tmp_path / "checkpoints" / "ckpt-00000009.h5.tmp").write_bytes(b"\x89HDF partial")
    assert ckpt.find_latest(tmp_path).name == "ckpt-00000005.h5"


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    for step in (1, 2, 3, 4):
        ckpt.save_checkpoint(tmp_path, step, arrays(step), {}, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "checkpoints")] == ["ckpt-00000003.h5", "ckpt-00000004.h5"]
    assert ckpt.find_latest(tmp_path / "nothing-here") is None


def test_unreadable_or_foreign_files_raise_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "missing.h5")
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="cannot be read"):
        ckpt.load_checkpoint(bad)
    import h5py

    with h5py.File(tmp_path / "foreign.h5", "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="no 'meta' attribute"):
        ckpt.load_checkpoint(tmp_path / "foreign.h5")
