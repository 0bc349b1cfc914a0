"""Parity with a torchvision-layout PyTorch EfficientNet (the oracle): logits, loss, grads."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model, softmax_cross_entropy

torch = pytest.importorskip("torch")
from tests.models.torch_efficientnet_ref import EfficientNetRef, norm_factory, randomise_running_stats  # noqa: E402

VARIANTS = {  # our name -> reference kwargs
    "efficientnet-tiny": dict(),
    "efficientnet-tiny-g16-gn": dict(group_size=16, expand_ratio=4, norm=norm_factory("group", eps=1e-3, groups=4)),
}


def _pair(name, **overrides):
    ours = build_model(name, num_classes=10, seed=3, **overrides)
    rng = np.random.default_rng(7)
    state = ours.state_dict()
    for key, value in state.items():  # non-trivial norm affine params and running statistics
        if key.endswith("running_var"):
            state[key] = (0.5 + rng.random(value.shape)).astype(np.float32)
        elif key.endswith("running_mean") or (key.endswith(".bias") and ".1." in key):
            state[key] = (0.1 * rng.standard_normal(value.shape)).astype(np.float32)
        elif key.endswith(".1.weight") and value.ndim == 1:
            state[key] = (1 + 0.1 * rng.standard_normal(value.shape)).astype(np.float32)
    ours.load_state_dict(state)
    kwargs = dict(VARIANTS[name])
    ref = EfficientNetRef("tiny", num_classes=10, dropout=overrides.get("dropout", 0.2),
                          drop_connect=overrides.get("drop_connect", 0.2), **kwargs)
    ref.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()}, strict=True)
    return ours, ref


def _batch(n=4, res=32):
    rng = np.random.default_rng(11)
    return rng.standard_normal((n, res, res, 3)).astype(np.float32), rng.integers(0, 10, n)


def _rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_eval_logits_match_torch(name):
    ours, ref = _pair(name)
    x, _ = _batch()
    ref.eval()
    with torch.no_grad():
        expected = ref(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)).numpy()
    got = ours.forward(x, training=False)
    assert _rel(got, expected) < 1e-4


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_train_loss_and_every_gradient_match_torch(name):
    ours, ref = _pair(name, dropout=0.0, drop_connect=0.0)
    x, labels = _batch(n=6)
    ref.train()
    xt = torch.from_numpy(x).permute(0, 3, 1, 2).requires_grad_(True)
    loss_t = torch.nn.functional.cross_entropy(ref(xt), torch.from_numpy(labels), label_smoothing=0.1)
    loss_t.backward()
    loss, dlogits = softmax_cross_entropy(ours.forward(x, training=True), labels, label_smoothing=0.1)
    dx = ours.backward(dlogits)
    assert abs(loss - loss_t.item()) <= 1e-4 * abs(loss_t.item())
    torch_grads = {k: v.grad.numpy() for k, v in ref.named_parameters()}
    assert [p.name for p in ours.params()] == list(torch_grads)
    # Biases of a norm whose output only reaches later batch norms have a gradient that is zero
    # in exact arithmetic (float32 noise ~1e-7 here): compare those at 1 % of the largest gradient.
    floor = 1e-2 * max(np.abs(g).max() for g in torch_grads.values())
    for p in ours.params():
        expected = torch_grads[p.name]
        assert np.abs(p.grad - expected).max() <= 1e-4 * max(np.abs(expected).max(), floor), p.name
    assert _rel(dx, xt.grad.permute(0, 2, 3, 1).numpy()) < 1e-4
    ref_buffers = dict(ref.named_buffers())
    for key, value in ours.buffers().items():  # running statistics after one training step
        np.testing.assert_allclose(value, ref_buffers[key].numpy(), rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.torch
def test_weights_saved_by_torch_load_into_our_model(tmp_path):
    """The path users take from torchvision's pretrained weights: torch -> safetensors -> us."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from models import load_state_dict_file

    torch.manual_seed(0)
    ref = EfficientNetRef("tiny", num_classes=10).eval()
    randomise_running_stats(ref)
    path = tmp_path / "tiny_torch.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    ours = build_model("efficientnet-tiny", num_classes=10)
    ours.load_state_dict(load_state_dict_file(path), strict=True)
    x, _ = _batch()
    with torch.no_grad():
        expected = ref(torch.from_numpy(x).permute(0, 3, 1, 2)).numpy()
    assert _rel(ours.forward(x, training=False), expected) < 1e-4
