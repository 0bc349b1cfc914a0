"""Exponential moving average of weights: hand-computed values, swapping, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from models.optim.ema import ExponentialMovingAverage
from models.param import Param


def test_update_by_hand():
    p = Param("fc.weight", np.array([1.0, 10.0]))
    ema = ExponentialMovingAverage([p], decay=0.9)
    p.data[...] = [2.0, 0.0]
    ema.update()  # 0.9*[1, 10] + 0.1*[2, 0]
    np.testing.assert_allclose(ema.shadow["fc.weight"], [1.1, 9.0], rtol=1e-15)
    p.data[...] = [3.0, 0.0]
    ema.update()  # 0.9*[1.1, 9] + 0.1*[3, 0]
    np.testing.assert_allclose(ema.shadow["fc.weight"], [1.29, 8.1], rtol=1e-15)


def test_num_updates_warmup_matches_tf():
    # TF: decay = min(decay, (1 + n) / (10 + n)); n = 0 -> 0.1, n = 1 -> 2/11
    p = Param("fc.weight", np.array([0.0]))
    ema = ExponentialMovingAverage([p], decay=0.9999, use_num_updates=True)
    assert ema.current_decay() == pytest.approx(0.1)
    p.data[...] = 1.0
    ema.update()
    np.testing.assert_allclose(ema.shadow["fc.weight"], [0.9], rtol=1e-15)
    assert ema.current_decay() == pytest.approx(2.0 / 11.0)
    ema.num_updates = 10**7
    assert ema.current_decay() == 0.9999


def test_float64_shadows_of_float32_weights():
    p = Param("fc.weight", np.full(3, 1.0, np.float32))
    ema = ExponentialMovingAverage([p], decay=0.97, dtype=np.float64)
    assert ema.shadow["fc.weight"].dtype == np.float64
    p.data[...] = 1.0 + 2.0**-20
    for _ in range(100):
        ema.update()
    expected = 1.0 + 2.0**-20 * (1.0 - 0.97**100)
    np.testing.assert_allclose(ema.shadow["fc.weight"], expected, rtol=1e-15)


def test_averaged_swaps_in_and_restores():
    p = Param("fc.weight", np.array([0.0, 0.0]))
    ema = ExponentialMovingAverage([p], decay=0.5)
    p.data[...] = [4.0, 8.0]
    ema.update()
    with ema.averaged():
        np.testing.assert_array_equal(p.data, [2.0, 4.0])
    np.testing.assert_array_equal(p.data, [4.0, 8.0])


def test_copy_to_other_params_by_name():
    p = Param("fc.weight", np.array([1.0]))
    ema = ExponentialMovingAverage([p], decay=0.5)
    q = Param("fc.weight", np.array([7.0]))
    ema.copy_to([q])
    np.testing.assert_array_equal(q.data, [1.0])
    with pytest.raises(ValueError, match="no average"):
        ema.copy_to([Param("other", np.zeros(1))])


def test_state_dict_round_trip():
    p = Param("features.0.0.weight", np.arange(4.0))
    a = ExponentialMovingAverage([p], decay=0.9)
    p.data += 1.0
    a.update()
    saved = a.state_dict()
    assert set(saved) == {"ema/features.0.0.weight", "num_updates"}
    b = ExponentialMovingAverage([Param("features.0.0.weight", np.zeros(4))], decay=0.9)
    b.load_state_dict(saved)
    np.testing.assert_array_equal(b.shadow["features.0.0.weight"], a.shadow["features.0.0.weight"])
    assert b.num_updates == 1
    saved["ema/features.0.0.weight"] = np.zeros(5)
    with pytest.raises(ValueError, match="shape"):
        b.load_state_dict(saved)


@pytest.mark.parametrize("decay", [1.0, -0.1])
def test_bad_decay_is_rejected(decay):
    with pytest.raises(ValueError, match="decay"):
        ExponentialMovingAverage([Param("w", np.zeros(1))], decay=decay)
