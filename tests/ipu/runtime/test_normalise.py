import numpy as np
import pytest

from ipu.runtime.normalise import normalise


def _images(shape=(2, 3, 4, 5, 3)):
    return np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)


def test_matches_float64_formula_per_channel():
    x = _images()
    mean, std = [10.0, 128.0, 200.0], [2.0, 64.0, 50.0]
    y = normalise(x, mean, std)
    assert y.dtype == np.float32 and y.shape == x.shape
    ref = (x.astype(np.float64) - np.array(mean)) / np.array(std)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    y64 = normalise(x, mean, std, dtype=np.float64)
    np.testing.assert_allclose(y64, ref, rtol=0, atol=1e-12)


def test_writes_into_out():
    x = _images((4, 6, 6, 1))
    out = np.full(x.shape, np.nan, np.float32)
    result = normalise(x, [73.1], [90.3], out=out)
    assert result is out and np.isfinite(out).all()


def test_matches_torch():
    torch = pytest.importorskip("torch")
    x = _images((3, 7, 7, 3))
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    ref = (torch.from_numpy(x).double() - torch.from_numpy(mean)) / torch.from_numpy(std)
    np.testing.assert_allclose(normalise(x, mean, std), ref.float().numpy(), rtol=1e-6, atol=1e-6)


def test_bad_arguments():
    x = _images((2, 3, 3, 3))
    with pytest.raises(TypeError, match="uint8"):
        normalise(x.astype(np.float32), [0, 0, 0], [1, 1, 1])
    with pytest.raises(ValueError, match="one value per channel"):
        normalise(x, [0.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        normalise(x, [0, 0, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="out must be"):
        normalise(x, [0, 0, 0], [1, 1, 1], out=np.empty((2, 3, 3, 2), np.float32))
