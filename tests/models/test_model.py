"""The Model contract: block ranges, float64 end-to-end gradients, RNG, buffers, dense net."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from models import build_model, softmax_cross_entropy
from models.efficientnet import block_specs
from models.layer import Rng
from models.mbconv import MBConv, NormSpec
from tests.models.gradcheck import check_layer, check_model


def _batch(model, n=3, seed=0):
    rng = np.random.default_rng(seed)
    h, w, c = model.input_shape
    return rng.standard_normal((n, h, w, c)).astype(model.dtype), rng.integers(0, 10, n)


def test_split_block_ranges_equal_the_whole_model():
    model = build_model("efficientnet-tiny", num_classes=10, resolution=16, dropout=0.0, drop_connect=0.0)
    x, labels = _batch(model)
    logits = model.forward(x, True)
    _, dlogits = softmax_cross_entropy(logits, labels)
    model.backward(dlogits)
    whole = {p.name: p.grad.copy() for p in model.params()}
    mid = model.forward_blocks(x, 0, "block4a", True).copy()
    out = model.forward_blocks(mid, "block4a", None, True)
    np.testing.assert_allclose(out, logits, rtol=1e-6, atol=1e-6)
    dmid = model.backward_blocks(dlogits, 4, 9).copy()
    assert dmid.shape == mid.shape
    assert model.backward_blocks(dmid, "stem", "block4a", need_dx=False) is None
    for p in model.params():
        np.testing.assert_allclose(p.grad, whole[p.name], rtol=1e-5, atol=1e-6, err_msg=p.name)
    with pytest.raises(ValueError, match="unknown"):
        model.forward_blocks(x, "block9z")
    with pytest.raises(ValueError, match="empty"):
        model.forward_blocks(x, 3, 3)


@pytest.mark.parametrize("name", ["efficientnet-tiny", "efficientnet-tiny-g16-gn"])
def test_float64_model_gradients_by_finite_differences(name):
    model = build_model(name, num_classes=5, resolution=12, dtype=np.float64, seed=1, drop_connect=0.3, dropout=0.2)
    x, labels = _batch(model, n=4)
    labels = labels % 5

    def loss_at():
        model.set_rng(np.random.default_rng(42))  # the same dropout and drop-connect draws every time
        return softmax_cross_entropy(model.forward(x, True), labels, label_smoothing=0.1)

    _, dlogits = loss_at()
    check_model(model, loss_at, x, model.backward(dlogits))


def test_mbconv_block_with_drop_connect_gradients():
    holder = Rng()
    spec = block_specs(__import__("models").efficientnet_config("efficientnet-tiny"))[1]
    spec = type(spec)(**{**spec.__dict__, "stride": 1, "cout": spec.cin, "drop_prob": 0.5})
    block = MBConv(spec, NormSpec(), "same", holder, np.float64, np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((4, 5, 5, spec.cin))
    check_layer(block, x, samples=6, reset=lambda: setattr(holder, "gen", np.random.default_rng(3)))


def test_set_rng_makes_dropout_and_drop_connect_reproducible():
    model = build_model("efficientnet-tiny", num_classes=10, resolution=16, drop_connect=0.5, dropout=0.5)
    x, _ = _batch(model)
    model.set_rng(np.random.default_rng(9))
    a = model.forward(x, True)
    model.set_rng(np.random.default_rng(9))
    b = model.forward(x, True)
    c = model.forward(x, True)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(b, c)
    np.testing.assert_array_equal(model.forward(x, False), model.forward(x, False))


def test_training_step_reuses_buffers_once_warm():
    model = build_model("efficientnet-tiny", num_classes=10, resolution=64)
    x, labels = _batch(model, n=32)
    for _ in range(2):
        _, d = softmax_cross_entropy(model.forward(x, True), labels)
        model.backward(d, need_dx=False)
    tracemalloc.start()
    _, d = softmax_cross_entropy(model.forward(x, True), labels)
    model.backward(d, need_dx=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    stem_output = 32 * 32 * 32 * 8 * 4  # bytes of the smallest large activation
    assert peak < stem_output, f"a warm step allocated up to {peak} bytes at once"


def test_input_checks():
    model = build_model("efficientnet-tiny", num_classes=10)
    with pytest.raises(ValueError, match="NHWC"):
        model.forward(np.zeros((2, 3, 32, 32), np.float32), True)


def test_dense_mnist_network():
    model = build_model("dense-mnist", hidden=(32, 16))
    assert model.blocks() == ["fc1", "fc2", "fc3"]
    assert [p.name for p in model.params()] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                                                "fc3.bias"]
    assert model.state_dict()["fc1.weight"].shape == (32, 784)
    m64 = build_model("dense-mnist", hidden=(6,), dtype=np.float64, resolution=4)
    x, labels = _batch(m64, n=5)
    _, d = softmax_cross_entropy(m64.forward(x, True), labels)
    m64.backward(d)
    w = m64.params()[0]
    grad, old = w.grad[2, 3], w.data[2, 3]
    w.data[2, 3] = old + 1e-6
    up = softmax_cross_entropy(m64.forward(x, True), labels)[0]
    w.data[2, 3] = old - 1e-6
    down = softmax_cross_entropy(m64.forward(x, True), labels)[0]
    assert grad == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-9)


def test_backward_recycles_gradient_buffers():
    model = build_model("efficientnet-b0", num_classes=10, resolution=32)
    x, labels = _batch(model, n=2)
    owned = []
    for _ in range(3):
        _, d = softmax_cross_entropy(model.forward(x, True), labels)
        model.backward(d)
        owned.append(len(model._pool._owned))
    assert owned[1] == owned[2]  # nothing leaks from step to step
    pool_bytes = sum(a.nbytes for free in model._pool._free.values() for a in free) + model._last_dx.nbytes
    layer_outputs = sum(p.activation_elems for p in model.profile(2) if p.kind != "act") * 4
    assert pool_bytes < 0.6 * layer_outputs  # vs one gradient buffer per layer before pooling


@pytest.mark.parametrize("name", ["efficientnet-tiny", "efficientnet-tiny-g16-gn"])
def test_gradients_written_over_consumed_ones_change_nothing(name, monkeypatch):
    """backward_consuming (norms and SE write dx over a dy nobody needs any more) gives bitwise the
    gradients of separate buffers, drop-connect and input gradient included, with a smaller pool."""
    from models.layer import ConsumesGradient

    over, pool_over = _two_steps(build_model(name, num_classes=10, resolution=32), n=8)
    monkeypatch.setattr(ConsumesGradient, "backward_consuming", lambda self, dy: self._backward(dy, False))
    apart, pool_apart = _two_steps(build_model(name, num_classes=10, resolution=32), n=8)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(over, apart))
    assert pool_over < pool_apart


@pytest.mark.parametrize("name", ["efficientnet-tiny", "efficientnet-tiny-g16-gn", "efficientnet-b0", "resnet50"])
def test_input_gradients_written_over_dead_inputs_change_nothing(name, monkeypatch):
    """A convolution whose input is the private output of the layer before it writes its dx over
    that input once its weight gradient is done: bitwise the gradients of separate buffers, with a
    smaller pool, and some convolution really did it."""
    from models.conv import Conv2d
    from models.layer import Layer

    over_model = build_model(name, num_classes=10, resolution=32)
    marked = [m for m in _layers(over_model) if isinstance(m, Conv2d) and m.input_expendable]
    assert any(m.path != "im2col" for m in marked)  # (im2col keeps columns, not its input: it writes no dx over it)
    over, pool_over = _two_steps(over_model, n=4)
    monkeypatch.setattr(Layer, "mark_input_expendable", lambda self, expendable: None)
    apart_model = build_model(name, num_classes=10, resolution=32)
    assert not any(m.input_expendable for m in _layers(apart_model))
    apart, pool_apart = _two_steps(apart_model, n=4)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(over, apart))
    assert pool_over < pool_apart


def _two_steps(model, n):
    """Two training steps (the second meets the pool's buffers again): every gradient, the input
    gradient, and the bytes the gradient pool holds."""
    model.set_rng(np.random.default_rng(1))
    x, labels = _batch(model, n=n)
    for _ in range(2):
        _, d = softmax_cross_entropy(model.forward(x, True), labels)
        dx = model.backward(d)
    pool = sum(a.nbytes for free in model._pool._free.values() for a in free) + model._last_dx.nbytes
    return [p.grad.copy() for p in model.params()] + [dx.copy()], pool


def _layers(model):
    todo = list(model._blocks)
    seen = []
    while todo:
        layer = todo.pop()
        seen.append(layer)
        todo.extend(layer.children())
    return seen
