"""Static and dynamic loss scaling, and the non-finite-loss error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.optim.loss_scaling import (
    LossScaleConfig,
    LossScaler,
    NonFiniteLossError,
    all_finite,
)


def test_static_unscale_divides_in_place_and_reports_finite():
    scaler = LossScaler(LossScaleConfig(kind="static", initial_scale=128.0))
    grads = [np.array([128.0, -256.0], np.float32), np.array([[64.0]], np.float16)]
    assert scaler.unscale_(grads) is True
    np.testing.assert_array_equal(grads[0], [1.0, -2.0])
    np.testing.assert_array_equal(grads[1], [[0.5]])
    assert scaler.update(True, step=0) is True
    assert scaler.scale == 128.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_unscale_detects_any_non_finite_value_and_still_unscales_the_rest(bad):
    scaler = LossScaler(LossScaleConfig(initial_scale=4.0))
    grads = [np.array([4.0, bad, 8.0]), np.array([12.0])]
    assert scaler.unscale_(grads) is False
    np.testing.assert_array_equal(grads[1], [3.0])


def test_static_non_finite_step_raises_with_step_and_advice():
    scaler = LossScaler(LossScaleConfig(kind="static"))
    with pytest.raises(NonFiniteLossError) as info:
        scaler.update(False, step=1234, loss=float("nan"))
    message = str(info.value)
    assert "1234" in message
    assert "learning rate" in message and "dynamic" in message
    assert info.value.step == 1234 and math.isnan(info.value.loss)


def test_dynamic_grows_after_interval_and_halves_on_overflow():
    cfg = LossScaleConfig(kind="dynamic", initial_scale=8.0, growth_interval=3, min_scale=1.0, max_scale=32.0)
    scaler = LossScaler(cfg)
    assert [scaler.update(True, step=i) for i in range(3)] == [True, True, True]
    assert scaler.scale == 16.0
    assert scaler.update(True, step=3) is True
    assert scaler.update(False, step=4, loss=float("inf")) is False  # skipped
    assert scaler.scale == 8.0 and scaler.good_steps == 0 and scaler.skipped_steps == 1
    for i in range(6):
        scaler.update(True, step=5 + i)
    assert scaler.scale == 32.0
    for i in range(3):
        scaler.update(True, step=11 + i)
    assert scaler.scale == 32.0  # max_scale bound


def test_dynamic_at_min_scale_stops_the_run():
    scaler = LossScaler(LossScaleConfig(kind="dynamic", initial_scale=2.0, min_scale=1.0))
    assert scaler.update(False, step=10) is False
    assert scaler.scale == 1.0
    with pytest.raises(NonFiniteLossError, match="update 11.*minimum"):
        scaler.update(False, step=11)


def test_dynamic_scaling_recovers_from_float16_overflow():
    # Gradients of size ~1e3 scaled by 2^10 overflow float16 (max 65504); the scaler backs off
    # until they fit, skipping those steps, then training steps go through.
    true_grad = np.array([1500.0, -700.0])
    scaler = LossScaler(LossScaleConfig(kind="dynamic", initial_scale=2.0**10, growth_interval=100))
    applied = []
    for step in range(8):
        with np.errstate(over="ignore"):  # the float16 backward overflowing, on purpose
            grads = [(true_grad * scaler.scale).astype(np.float16)]
        finite = scaler.unscale_(grads)
        if scaler.update(finite, step=step, loss=1.0):
            applied.append(step)
            np.testing.assert_allclose(grads[0], true_grad, rtol=1e-3)
    assert scaler.skipped_steps == 5  # 1500 * 2^k > 65504 for k = 10, 9, 8, 7, 6
    assert scaler.scale == 2.0**5  # 1500 * 32 = 48000 fits
    assert applied == [5, 6, 7]


def test_state_dict_round_trip():
    a = LossScaler(LossScaleConfig(kind="dynamic", initial_scale=64.0, growth_interval=5))
    a.update(False, step=0)
    a.update(True, step=1)
    b = LossScaler(LossScaleConfig(kind="dynamic", initial_scale=64.0, growth_interval=5))
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == {"scale": 32.0, "good_steps": 1, "skipped_steps": 1}
    with pytest.raises(ValueError, match="missing keys"):
        b.load_state_dict({"scale": 1.0})


def test_all_finite():
    assert all_finite(np.zeros(0))
    assert all_finite(np.array([1e38, -1e38], np.float32))
    assert not all_finite(np.array([1.0, np.nan]))


@pytest.mark.parametrize(
    "kwargs, match",
    [({"kind": "auto"}, "loss_scaling.kind"), ({"initial_scale": 0.0}, "initial_scale"),
     ({"growth_factor": 1.0}, "growth_factor"), ({"backoff_factor": 1.0}, "backoff_factor"),
     ({"growth_interval": 0}, "growth_interval"), ({"min_scale": 256.0}, "min_scale")],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossScaleConfig(**kwargs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_one_pass_unscale_is_bitwise_numpys_and_finds_every_bad_value(dtype):
    from models.optim import _kernels

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(10_001) * 1e3).astype(dtype)
    divisor, scale = 12, 384.0
    want = x.copy()
    want *= 1.0 / (divisor * scale)  # numpy casts the Python float to x's dtype
    got = x.copy()
    assert LossScaler(LossScaleConfig(initial_scale=scale)).unscale_([got], divisor=divisor) is True
    assert got.tobytes() == want.tobytes()
    for where in (0, 4_567, 10_000):
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[where] = bad
            assert not _kernels.scale_all_finite(y, dtype(0.5)), (where, bad)
    big = np.full(5, np.finfo(dtype).max, dtype)  # finite, but the scaled value overflows
    assert not _kernels.scale_all_finite(big, dtype(2.0))


@pytest.mark.parametrize("compiled", [True, False])
def test_unscale_into_writes_what_unscale_and_a_copy_write_and_leaves_the_sum(monkeypatch, compiled):
    """The engine's one pass from its float64 gradient sum into the model's float32 gradients."""
    from models.optim import loss_scaling

    monkeypatch.setattr(loss_scaling, "ENABLED", compiled)  # False: the numpy path (POPRUN_JIT=0)
    rng = np.random.default_rng(5)
    total = rng.standard_normal(10_001) * 1e3
    scaler = LossScaler(LossScaleConfig(initial_scale=128.0))
    want = total.copy()
    assert scaler.unscale_([want], divisor=12) is True
    want = want.astype(np.float32)
    out = np.empty(total.size, np.float32)
    before = total.copy()
    assert scaler.unscale_into(total, out, divisor=12) is True
    assert out.tobytes() == want.tobytes() and total.tobytes() == before.tobytes()
    total[4_567] = np.inf
    assert scaler.unscale_into(total, out, divisor=12) is False
    with pytest.raises(ValueError, match="shape"):
        scaler.unscale_into(total, out[:-1])
