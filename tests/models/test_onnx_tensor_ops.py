"""Slice, Gather, Split and Pad of computed tensors, ReduceMean over any axes, Pow with a constant exponent, Sqrt and
Reciprocal train (``models.onnx.ops_tensor``): float64 finite-difference checks of each op, and small torch
networks that use them (token indexing and slicing, ``chunk``, padding, means over tokens, a hand-written RMS norm,
ShuffleNet's channel split and shuffle; MobileNet-V3's Hardsigmoid gate) whose logits and gradients equal
torch's in float64."""

from __future__ import annotations

import numpy as np
import pytest

from models.onnx.ops_tensor import Gather, Pad, Power, ReduceMean, Slice
from tests.models.gradcheck import check_layer
from tests.models.onnx_parity import OpLayer, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn


def nhwc(shape):
    return tuple(shape[i] for i in (0, 2, 3, 1)) if len(shape) == 4 else shape


@pytest.mark.parametrize("shape,index", [
    ((2, 5, 4), (slice(None), slice(1, 4), slice(None, None, 2))),
    ((2, 3, 6, 5), (slice(None), slice(0, 2), slice(5, 0, -2), slice(1, None))),
])
def test_slice_matches_finite_differences(shape, index):
    x = np.random.default_rng(0).standard_normal(nhwc(shape))
    check_layer(OpLayer(Slice("s", ["x"], "y", index)), x, samples=30, rtol=1e-6)


@pytest.mark.parametrize("shape,pads", [((2, 5, 4), ((0, 0), (1, 2), (0, 3))), ((2, 3, 4, 5), ((0, 0), (0, 1), (2, 0), (1, 1)))])
def test_pad_matches_finite_differences(shape, pads):
    x = np.random.default_rng(4).standard_normal(nhwc(shape))
    check_layer(OpLayer(Pad("p", ["x"], "y", pads, 0.5)), x, samples=30, rtol=1e-6)


@pytest.mark.parametrize("shape,indices,axis", [((2, 5, 4), np.array(0), 1), ((2, 5, 4), np.array([3, -1, 3]), 2),
                                                ((2, 3, 4, 5), np.array([[1, 0], [2, 2]]), 1)])
def test_gather_matches_finite_differences(shape, indices, axis):
    """A scalar index drops the axis; repeated indices add their gradients."""
    x = np.random.default_rng(1).standard_normal(nhwc(shape))
    check_layer(OpLayer(Gather("g", ["x"], "y", indices, axis)), x, samples=30, rtol=1e-6)


@pytest.mark.parametrize("shape,axes,keepdims", [((2, 5, 4), (1,), False), ((2, 5, 4), (1, 2), True),
                                                 ((2, 3, 4, 5), (1,), True), ((2, 3, 4, 5), (1, 3), False)])
def test_reduce_mean_matches_finite_differences(shape, axes, keepdims):
    x = np.random.default_rng(2).standard_normal(nhwc(shape))
    check_layer(OpLayer(ReduceMean("m", ["x"], "y", axes, keepdims)), x, samples=30, rtol=1e-6)


@pytest.mark.parametrize("op,p", [("Pow", 2.0), ("Pow", 3.0), ("Pow", -1.5), ("Pow", 0.5), ("Sqrt", 0.5),
                                  ("Reciprocal", -1.0)])
def test_power_matches_finite_differences(op, p):
    x = np.random.default_rng(3).uniform(0.5, 2.0, (2, 3, 4))
    check_layer(OpLayer(Power("p", ["x"], "y", op, p)), x, samples=24, rtol=1e-6)


class Tokens(nn.Module):
    """A patchified feature map as tokens [N, T, D]: the first token (Gather), a slice of the rest (Slice), a
    ``chunk`` of the features (Split), a mean over tokens (ReduceMean, keepdims 0 and 1) and an RMS norm written
    with Pow, ReduceMean, Sqrt and Reciprocal."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 2, stride=2)
        self.fc = nn.Linear(4, 8)
        self.head = nn.Linear(8 + 4 + 4, 5)

    def forward(self, x):
        x = nn.functional.pad(x, (1, 0, 0, 1), value=0.25)  # Pad: [N, 3, 6, 6] -> [N, 3, 7, 7]
        t = self.stem(x[:, :, :6, 1:]).flatten(2).transpose(1, 2)  # [N, 9, 8]
        t = t * torch.reciprocal(torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))
        first = t[:, 0]
        rest = t[:, 1::2]
        a, b = rest.chunk(2, dim=2)
        mixed = self.fc(a * b.pow(3)).mean(1)
        return self.head(torch.cat([first + mixed, a.mean(1), (b * b).mean(1)], 1))


def test_token_indexing_and_reductions_train_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(Tokens(), (2, 3, 6, 6))
    kinds = {type(op).__name__ for op in graph_ops(model)}
    assert {"Slice", "Gather", "ReduceMean", "Power", "Pad"} <= kinds


def channel_shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)


class ShuffleUnit(nn.Module):
    """torchvision's ShuffleNetV2 unit of stride 1: half the channels pass, half go through a 1x1, a depthwise
    3x3 and a 1x1 (batch norm, ReLU); the halves concatenated and shuffled."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        h = c // 2
        self.branch2 = nn.Sequential(nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU(),
                                     nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h),
                                     nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU())

    def forward(self, x):
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((x1, self.branch2(x2)), dim=1), 2)


class TinyShuffleNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.stage2 = nn.Sequential(ShuffleUnit(), ShuffleUnit())
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.stage2(self.conv1(x)).mean([2, 3]))


def test_shufflenet_channel_split_and_shuffle_train_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(TinyShuffleNet(), (2, 3, 8, 8))
    assert sum(type(op).__name__ == "Slice" for op in graph_ops(model)) == 4  # two Splits, two outputs each


class HardGate(nn.Module):
    """MobileNet-V3's squeeze-excitation: ReLU inside, torch's ``Hardsigmoid`` gate (ONNX's HardSigmoid with
    float32's 1/6; torch's backward multiplies by float32's 1/6 in float64 too), and a Hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = nn.functional.hardswish(self.conv(x))
        gate = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True)))) * 4)
        return self.head((x * gate).mean((2, 3)))


def test_a_hardsigmoid_gate_trains_as_torchs_in_float64():
    torch.manual_seed(0)
    assert_step_equals_torch(HardGate(), (2, 3, 6, 6))


def test_mod_folds_with_onnxs_signs():
    """Mod (shape arithmetic, as torch's MultiheadAttention exports it) is a constant op: the divisor's sign
    (fmod=0), or the dividend's (fmod=1)."""
    from models.onnx.fold import evaluate

    a, b = np.array([7, -7, 7], np.int64), np.array([3, 3, -3], np.int64)
    assert evaluate("Mod", {}, [a, b], 17).tolist() == [1, 2, -2]
    assert evaluate("Mod", {"fmod": 1}, [a.astype(float), b.astype(float)], 17).tolist() == [1, -1, 1]


def test_a_mask_built_by_scatter_nd_and_not_folds():
    """Swin's shifted-window mask: ScatterND into a constant and Not are constant ops."""
    from models.onnx.fold import evaluate

    out = evaluate("ScatterND", {}, [np.zeros((2, 3)), np.array([[0, 1], [1, 2]]), np.array([5.0, 7.0])], 17)
    assert out.tolist() == [[0, 5, 0], [0, 0, 7]]
    assert evaluate("Not", {}, [out > 0], 17).tolist() == [[True, False, True], [True, True, False]]
