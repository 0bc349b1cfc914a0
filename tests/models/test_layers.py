"""Norms, activations, SE, pooling, dense, dropout: forward against numpy, gradient checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.models.gradcheck import check_layer
from models.activation import Activation
from models.dense import Dense
from models.layer import Rng
from models.norm import BatchNorm2d, GroupNorm
from models.pool import Dropout, GlobalAvgPool, MaxPool2d
from models.se import SqueezeExcitation

ACT = {None: lambda z: z, "silu": lambda z: z / (1 + np.exp(-z)), "relu": lambda z: np.maximum(z, 0)}


def _x(shape=(3, 4, 5, 8), seed=0):
    return np.random.default_rng(seed).standard_normal(shape) * 2 + 1


def _randomise(norm, rng):
    norm.weight.data[:] = rng.standard_normal(norm.channels)
    norm.bias.data[:] = rng.standard_normal(norm.channels)


@pytest.mark.parametrize("act,training", list(itertools.product([None, "silu", "relu"], [True, False])))
def test_batch_norm(act, training):
    rng = np.random.default_rng(1)
    bn = BatchNorm2d("bn", "b", 8, eps=1e-3, momentum=0.1, act=act, dtype=np.float64)
    _randomise(bn, rng)
    rm, rv = rng.standard_normal(8), rng.random(8) + 0.5
    bn.running_mean[:], bn.running_var[:] = rm, rv
    x = _x()
    mean, var = (x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))) if training else (rm, rv)
    expected = ACT[act]((x - mean) / np.sqrt(var + 1e-3) * bn.weight.data + bn.bias.data)
    np.testing.assert_allclose(bn.forward(x, training), expected, rtol=1e-12, atol=1e-12)
    if training:  # torch: biased variance to normalise, unbiased in the running estimate
        m = x.size // 8
        np.testing.assert_allclose(bn.running_mean, 0.9 * rm + 0.1 * mean, rtol=1e-12)
        np.testing.assert_allclose(bn.running_var, 0.9 * rv + 0.1 * var * m / (m - 1), rtol=1e-12)
        assert int(bn.num_batches_tracked) == 1
    check_layer(bn, x, training)


@pytest.mark.parametrize("act", [None, "silu", "relu"])
def test_batch_norm_float32_backward_is_close_to_float64(act):
    """The float32 backward (SiLU's derivative in float32 arithmetic, sums in float64) against the
    float64 layer on the same values: within a few float32 roundings of the largest gradient."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 6, 6, 16)) * 2 + 0.5).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    grads = {}
    for dtype in (np.float32, np.float64):
        bn = BatchNorm2d("bn", "b", 16, act=act, dtype=dtype)
        bn.weight.data[:] = np.linspace(0.5, 2.0, 16)
        bn.bias.data[:] = np.linspace(-1.0, 1.0, 16)
        bn.forward(x.astype(dtype), True)
        dx = bn.backward(dy.astype(dtype))
        grads[dtype] = (dx.astype(np.float64), bn.weight.grad.astype(np.float64), bn.bias.grad.astype(np.float64))
    for got, exact in zip(grads[np.float32], grads[np.float64]):
        assert np.abs(got - exact).max() <= 1e-6 * np.abs(exact).max()


def test_batch_norm_keeps_precision_with_a_large_mean():
    x = (1000 + np.random.default_rng(0).standard_normal((4, 8, 8, 4))).astype(np.float32)
    bn = BatchNorm2d("bn", "b", 4, eps=1e-5)
    y = bn.forward(x, True).astype(np.float64)
    x64 = x.astype(np.float64)
    exact = (x64 - x64.mean(axis=(0, 1, 2))) / np.sqrt(x64.var(axis=(0, 1, 2)) + 1e-5)
    assert np.abs(y - exact).max() < 1e-5


@pytest.mark.parametrize("act,groups", list(itertools.product([None, "silu", "relu"], [1, 2, 8])))
def test_group_norm(act, groups):
    rng = np.random.default_rng(2)
    gn = GroupNorm("gn", "b", 8, groups, eps=1e-3, act=act, dtype=np.float64)
    _randomise(gn, rng)
    x = _x()
    xg = x.reshape(3, 4, 5, groups, 8 // groups)
    mean, var = xg.mean(axis=(1, 2, 4), keepdims=True), xg.var(axis=(1, 2, 4), keepdims=True)
    expected = ACT[act](((xg - mean) / np.sqrt(var + 1e-3)).reshape(x.shape) * gn.weight.data + gn.bias.data)
    np.testing.assert_allclose(gn.forward(x, True), expected, rtol=1e-12, atol=1e-12)
    check_layer(gn, x)


def test_fused_silu_in_float32_is_within_3_ulp():
    """The norm's SiLU on float32 tensors runs in float32: against float64 rounded once, at most
    3 ulp wherever sigmoid(z) is a normal float32 (z >= -87), and below that (outputs under
    1e-36) an absolute error under 1e-40; compared over every 97th float32 bit pattern."""
    bits = np.arange(0, 2 ** 31, 97, dtype=np.int64).astype(np.uint32).view(np.float32)
    z = np.concatenate([bits, -bits])
    z = z[np.isfinite(z) & (np.abs(z) <= 120) & (z != 0)]  # (a zero input gives +0 or -0)
    z = np.concatenate([z[: z.size // 64 * 64 - 64], np.zeros(64, np.float32)])
    bn = BatchNorm2d("bn", "b", 64, eps=1e-30, act="silu", dtype=np.float32)  # eval: z = x exactly
    y = bn.forward(z.reshape(-1, 1, 1, 64), training=False).reshape(-1)
    z64 = z.astype(np.float64)
    exact = z64 / (1 + np.exp(-z64))
    ulps = np.abs(y.view(np.int32).astype(np.int64) - exact.astype(np.float32).view(np.int32))
    normal = (z >= -87) & (z != 0)
    assert ulps[normal].max() <= 3
    assert np.abs(y[~normal] - exact[~normal]).max() < 1e-40
    assert np.all(y[z == 0] == 0) and np.all(y[z > 100] == z[z > 100])


def test_norm_rejects_bad_settings():
    with pytest.raises(ValueError, match="groups=3"):
        GroupNorm("gn", "b", 8, 3)
    with pytest.raises(ValueError, match="epsilon"):
        BatchNorm2d("bn", "b", 8, eps=0.0)
    with pytest.raises(ValueError, match="activation"):
        BatchNorm2d("bn", "b", 8, act="gelu")
    with pytest.raises(ValueError, match="more than one value"):
        BatchNorm2d("bn", "b", 8).forward(np.zeros((1, 1, 1, 8), np.float32), True)


@pytest.mark.parametrize("fn", ["silu", "relu", "sigmoid"])
def test_activations(fn):
    x = _x()
    act = Activation("a", "b", fn, np.float64)
    ref = {"silu": x / (1 + np.exp(-x)), "relu": np.maximum(x, 0), "sigmoid": 1 / (1 + np.exp(-x))}[fn]
    np.testing.assert_allclose(act.forward(x, True), ref, rtol=1e-14, atol=1e-300)
    check_layer(act, x)


def test_sigmoid_is_stable_for_large_inputs():
    act = Activation("a", "b", "silu", np.float32)
    y = act.forward(np.array([-200.0, -20.0, 0.0, 20.0, 200.0], np.float32), True)
    assert np.all(np.isfinite(y)) and y[0] == 0.0 and y[-1] == 200.0


@pytest.mark.parametrize("channels,squeeze", [(8, 2), (6, 1)])
def test_squeeze_excitation(channels, squeeze):
    rng = np.random.default_rng(3)
    se = SqueezeExcitation("se", "b", channels, squeeze, np.float64, rng)
    se.b1.data[:], se.b2.data[:] = rng.standard_normal(squeeze), rng.standard_normal(channels)
    x = _x((2, 3, 4, channels))
    h = x.mean(axis=(1, 2)) @ se.w1.data[:, :, 0, 0].T + se.b1.data
    gate = 1 / (1 + np.exp(-((h / (1 + np.exp(-h))) @ se.w2.data[:, :, 0, 0].T + se.b2.data)))
    np.testing.assert_allclose(se.forward(x, True), x * gate[:, None, None, :], rtol=1e-12)
    check_layer(se, x)


def test_global_average_pool_and_dense():
    x = _x()
    pool = GlobalAvgPool("p", "b", np.float64)
    np.testing.assert_allclose(pool.forward(x, True), x.mean(axis=(1, 2)), rtol=1e-13)
    check_layer(pool, x)
    rng = np.random.default_rng(4)
    dense = Dense("d", "b", 8, 5, dtype=np.float64, rng=rng)
    v = rng.standard_normal((4, 8))
    np.testing.assert_allclose(dense.forward(v, True), v @ dense.weight.data.T + dense.bias.data, rtol=1e-13)
    check_layer(dense, v)


@pytest.mark.parametrize("kernel,stride,pad", [(3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 3, 0), (1, 2, 0)])
def test_max_pool(kernel, stride, pad):
    x = _x((2, 7, 6, 3))
    pool = MaxPool2d("p", "b", kernel, stride, pad, np.float64)
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=-np.inf)
    ho, wo = (7 + 2 * pad - kernel) // stride + 1, (6 + 2 * pad - kernel) // stride + 1
    expected = np.stack([np.stack([padded[:, i * stride:i * stride + kernel, j * stride:j * stride + kernel].max(
        axis=(1, 2)) for j in range(wo)], axis=1) for i in range(ho)], axis=1)
    np.testing.assert_array_equal(pool.forward(x, True), expected)
    assert pool.out_shape(x.shape) == expected.shape
    check_layer(pool, x)


def test_max_pool_rejects_bad_settings():
    with pytest.raises(ValueError, match="padding <= kernel // 2"):
        MaxPool2d("p", "b", 3, 2, 2)
    with pytest.raises(ValueError, match="smaller than"):
        MaxPool2d("p", "b", 3, 1, 0).out_shape((1, 2, 2, 1))


def test_dropout_masks_scales_and_is_identity_in_eval():
    holder = Rng(np.random.default_rng(0))
    drop = Dropout("d", "b", 0.25, holder, np.float64)
    x = np.ones((200, 50))
    assert drop.forward(x, False) is x
    y = drop.forward(x, True)
    assert set(np.unique(y)) == {0.0, 1 / 0.75}
    assert abs((y == 0).mean() - 0.25) < 0.02
    check_layer(drop, _x(), reset=lambda: setattr(holder, "gen", np.random.default_rng(5)))
    with pytest.raises(ValueError, match="probability"):
        Dropout("d", "b", 1.0, holder)


def test_vectorised_exp_is_accurate():
    import numba

    from models.kernels.vmath import exp

    @numba.njit(error_model="numpy")
    def apply(x, y):
        for i in range(x.size):
            y[i] = exp(x[i])

    x = np.concatenate([np.linspace(-708, 709, 20001), np.random.default_rng(0).uniform(-30, 30, 20000)])
    y = np.empty_like(x)
    apply(x, y)
    assert np.abs(y / np.exp(x) - 1).max() < 1e-15


def test_thread_cap_is_validated():
    from models.kernels import threads as _threads

    with pytest.raises(ValueError, match="set_num_threads"):
        _threads.set_num_threads(0)
    before = _threads.get_num_threads()
    _threads.set_num_threads(1)
    assert _threads.get_num_threads() == 1
    _threads.set_num_threads(before)


def test_batch_norm_recomputing_sigmoid_in_backward_is_bitwise_keeping_it(monkeypatch):
    import models.norm as norm_module
    from models.norm import BatchNorm2d

    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 6, 16)).astype(np.float32) * 3
    dy = rng.standard_normal(x.shape).astype(np.float32)
    runs = []
    for threshold in (1 << 62, 0):  # keep sigmoid(z) / recompute it from the input
        monkeypatch.setattr(norm_module, "RECOMPUTE_SIGMOID_ELEMS", threshold)
        bn = BatchNorm2d("n", "b", 16, act="silu")
        bn.weight.data[...] = rng.standard_normal(16).astype(np.float32) if not runs else runs[0][3]
        y = bn.forward(x, True).copy()
        dx = bn.backward(dy.copy()).copy()
        runs.append((y, dx, (bn.weight.grad.copy(), bn.bias.grad.copy()), bn.weight.data.copy(), bn.keep))
    assert runs[0][4] and not runs[1][4]  # the second run really recomputed
    for a, b in zip(runs[0][:2], runs[1][:2]):
        assert a.tobytes() == b.tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(runs[0][2], runs[1][2]))


@pytest.mark.parametrize("act", [0, 1, 2])  # none, SiLU, ReLU (models.kernels.norm codes)
@pytest.mark.parametrize("shape", [(3, 196, 8), (2, 49, 48), (4, 1, 288), (2, 15, 7), (1, 4096, 16)])
def test_group_norm_forward_on_widened_rows_is_bitwise_the_row_kernel(shape, act):
    """group_affine_act reads each image as rows of several pixels (a row of 8 channels would not
    vectorise) and splits big images into blocks; per image it must give bitwise what the
    per-row kernel (batch norm's affine_act, per-column parameters) gives."""
    import models.kernels.group_norm as GK
    import models.kernels.norm as K

    rng = np.random.default_rng(7)
    n, m, c = shape
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    mu, lo, a = (rng.standard_normal((n, c)).astype(np.float32) for _ in range(3))
    lo *= 1e-7
    beta = rng.standard_normal(c).astype(np.float32)
    y, sig = np.full_like(x, np.nan), np.full_like(x, np.nan)
    GK.group_affine_act(x, mu, lo, a, beta, y, sig, act, act == K.SILU)
    assert GK.wide_rows(196, 8) == 7 and GK.wide_rows(49, 48) == 1 and GK.wide_rows(15, 7) == 5
    for i in range(n):
        want_y, want_sig = np.empty((m, c), np.float32), np.empty((m, c), np.float32)
        K.affine_act(x[i], mu[i], lo[i], a[i], beta, want_y, want_sig, act, act == K.SILU)
        assert y[i].tobytes() == want_y.tobytes()
        if act == K.SILU:
            assert sig[i].tobytes() == want_sig.tobytes()


def test_erfc_is_the_library_erfc_element_by_element_in_any_shape():
    import math

    from models.activation import erfc

    x = np.concatenate([np.linspace(-30, 30, 601), [0.0, -0.0, 1e-300, -40.0, 40.0]]).reshape(2, 3, -1)
    assert erfc(x).shape == x.shape
    assert np.array_equal(erfc(x).ravel(), [math.erfc(v) for v in x.ravel()])
    assert erfc(x.astype(np.float32)).dtype == np.float64
