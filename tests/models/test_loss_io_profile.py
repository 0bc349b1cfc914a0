"""Softmax cross-entropy, state_dict files and per-layer profiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import build_model, load_state_dict_file, save_state_dict, softmax_cross_entropy


def test_cross_entropy_exact_values():
    logits = np.array([[0.0, 0.0], [math.log(3.0), 0.0]], np.float64)
    loss, d = softmax_cross_entropy(logits, np.array([0, 1]))
    assert loss == pytest.approx((math.log(2) + math.log(4)) / 2, rel=1e-15)
    np.testing.assert_allclose(d, [[-0.25, 0.25], [0.375, -0.375]], rtol=1e-15)
    loss_s, d_s = softmax_cross_entropy(logits, np.array([0, 1]), label_smoothing=0.2)
    expected = (0.9 * math.log(2) + 0.1 * math.log(2) + 0.9 * math.log(4) + 0.1 * math.log(4 / 3)) / 2
    assert loss_s == pytest.approx(expected, rel=1e-15)
    np.testing.assert_allclose(d_s, [[-0.2, 0.2], [0.325, -0.325]], rtol=1e-14)


def test_cross_entropy_gradient_and_stability():
    rng = np.random.default_rng(0)
    z, y = rng.standard_normal((4, 6)), rng.integers(0, 6, 4)
    _, d = softmax_cross_entropy(z, y, 0.1)
    for i, j in [(0, 0), (1, 3), (3, 5)]:
        zp, zm = z.copy(), z.copy()
        zp[i, j] += 1e-6
        zm[i, j] -= 1e-6
        numeric = (softmax_cross_entropy(zp, y, 0.1)[0] - softmax_cross_entropy(zm, y, 0.1)[0]) / 2e-6
        assert d[i, j] == pytest.approx(numeric, rel=1e-6)
    big, dbig = softmax_cross_entropy(np.array([[1000.0, -1000.0]], np.float32), np.array([1]))
    assert big == pytest.approx(2000.0) and dbig.dtype == np.float32
    with pytest.raises(ValueError, match=r"labels must be in \[0, 6\)"):
        softmax_cross_entropy(z, np.array([0, 1, 2, 6]))


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_state_dict_round_trip_through_files(tmp_path, suffix):
    model = build_model("efficientnet-tiny", num_classes=10, seed=1)
    path = tmp_path / f"weights{suffix}"
    save_state_dict(path, model.state_dict())
    loaded = load_state_dict_file(path)
    other = build_model("efficientnet-tiny", num_classes=10, seed=2)
    other.load_state_dict(loaded)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[key], value)
        assert loaded[key].dtype == value.dtype


def test_state_dict_errors_name_the_key(tmp_path):
    model = build_model("efficientnet-tiny", num_classes=10)
    sd = model.state_dict()
    sd["classifier.1.weight"] = np.zeros((3, 320), np.float32)
    with pytest.raises(ValueError, match=r"'classifier.1.weight' has shape \(3, 320\) .* \(10, 320\)"):
        model.load_state_dict(sd)
    sd = model.state_dict()
    del sd["features.0.0.weight"]
    sd["extra.weight"] = np.zeros(1)
    with pytest.raises(KeyError, match="features.0.0.weight.*extra.weight"):
        model.load_state_dict(sd)
    model.load_state_dict(sd, strict=False)
    with pytest.raises(ValueError, match="extension"):
        save_state_dict(tmp_path / "w.pt", sd)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        load_state_dict_file(tmp_path / "missing.npz")


def test_profile_counts_b0():
    prof = build_model("efficientnet-b0").profile(1)
    assert sum(p.params for p in prof) == 5_288_548
    macs = sum(p.flops_fwd for p in prof if p.matmul) / 2
    assert 0.38e9 < macs < 0.40e9  # torchvision: 0.39 GFLOPS (multiply-adds)
    assert prof[0].name == "features.0.0" and prof[0].block == "stem" and prof[0].activation_elems == 112 * 112 * 32
    assert {p.kind for p in prof} >= {"conv", "dwconv", "dense", "norm", "act", "se", "pool", "dropout", "loss", "add"}
    assert [p.block for p in prof][-1] == "head"
    two = build_model("efficientnet-b0").profile(2)
    assert sum(p.flops_fwd for p in two) == 2 * sum(p.flops_fwd for p in prof)


def test_profile_g16_b4_macs_match_the_reference_note():
    prof = build_model("efficientnet-b4-g16-gn", resolution=380).profile(1)
    macs = sum(p.flops_fwd for p in prof if p.matmul) / 2
    assert 6.1e9 < macs < 6.25e9  # reference note: 6.18 GMAC at 380
