"""Pooling windows and dilated convolutions as torch has them, in float64: ``AvgPool2d`` (count_include_pad, ceil
mode), ``MaxPool2d`` with (h, w) kernels and strides, asymmetric pads and ceil mode, and ``Conv2d`` with a dilation
(the im2col path): values and gradients equal torch's, and backward matches finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from models.conv import Conv2d
from models.pool import AvgPool2d, MaxPool2d, pool_size
from tests.models.gradcheck import check_layer

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (kernel, stride, padding) as torch takes them; sizes where ceil mode adds a window, and where torch drops the
# one that would start in the padding (8 and 9 rows, 3/2/1: the last window's extra row is beyond the padding)
WINDOWS = [(2, 2, 0), (3, 2, 1), (3, 1, 1), ((3, 2), (2, 1), (1, 0)), (2, 2, 1)]
SIZES = [(8, 8), (9, 7), (5, 6)]


def _pads(padding) -> tuple[int, int, int, int]:
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return ph, ph, pw, pw


def _torch(fn, x, dy, *args):
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
    yt = fn(xt, *args)
    yt.backward(torch.from_numpy(dy.transpose(0, 3, 1, 2).copy()))
    return yt.detach().numpy().transpose(0, 2, 3, 1), xt.grad.numpy().transpose(0, 2, 3, 1)


@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("ceil", [False, True])
def test_pooling_equals_torchs_values_and_gradients(hw, window, ceil):
    kernel, stride, padding = window
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, *hw, 3))
    for include_pad in (False, True):
        pool = AvgPool2d("a", "b", kernel, stride, _pads(padding), ceil, include_pad, np.float64)
        y = pool.forward(x, True)
        dy = rng.standard_normal(y.shape)
        want_y, want_dx = _torch(F.avg_pool2d, x, dy, kernel, stride, padding, ceil, include_pad)
        np.testing.assert_allclose(y, want_y, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(pool.backward(dy), want_dx, rtol=1e-13, atol=1e-15)
    pool = MaxPool2d("m", "b", kernel, stride, _pads(padding), np.float64, ceil)
    y = pool.forward(x, True)
    want_y, want_dx = _torch(F.max_pool2d, x, dy, kernel, stride, padding, 1, ceil)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(pool.backward(dy), want_dx, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("include_pad", [False, True])
def test_average_pooling_backward_matches_finite_differences(include_pad):
    x = np.random.default_rng(1).standard_normal((2, 7, 8, 3))
    check_layer(AvgPool2d("a", "b", (3, 2), (2, 3), (1, 0, 1, 1), True, include_pad, np.float64), x, samples=30)


def test_ceil_mode_drops_a_last_window_that_starts_in_the_padding():
    assert pool_size(9, 3, 2, 1, 1, True) == 5 and pool_size(9, 3, 2, 1, 1, False) == 5
    assert pool_size(8, 3, 2, 1, 1, True) == 5 and pool_size(8, 3, 2, 1, 1, False) == 4
    assert pool_size(5, 2, 2, 1, 1, True) == 3  # ceil((5 + 2 - 2) / 2) + 1 = 4 would start in the padding


def test_pooling_rejects_pads_wider_than_half_the_window():
    with pytest.raises(ValueError, match="padding <= kernel // 2"):
        AvgPool2d("a", "b", (3, 2), 1, (1, 1, 2, 0))
    with pytest.raises(ValueError, match="smaller than the 3x3 window"):
        AvgPool2d("a", "b", 3, 1).out_shape((1, 2, 2, 1))


@pytest.mark.parametrize("cin,cout,kernel,stride,padding,groups,dilation", [
    (3, 5, 3, 1, 2, 1, 2), (4, 6, 3, 2, 1, 2, (2, 3)), (4, 4, 3, 1, 3, 4, 3), (2, 3, (3, 2), 2, (1, 2, 0, 1), 1, 2)])
def test_dilated_convolution_equals_torchs_and_its_finite_differences(cin, cout, kernel, stride, padding, groups,
                                                                       dilation):
    rng = np.random.default_rng(2)
    conv = Conv2d("c", "b", cin, cout, kernel, stride, padding, groups, True, np.float64, rng, dilation)
    assert conv.path == "im2col"
    x = rng.standard_normal((2, 9, 10, cin))
    y = conv.forward(x, True)
    dy = rng.standard_normal(y.shape)
    dx = conv.backward(dy)
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
    w, b = (torch.from_numpy(p.data.copy()).requires_grad_() for p in conv.params())
    pad, xin = padding, xt
    if isinstance(padding, tuple):  # (top, bottom, left, right): torch pads explicitly
        xin, pad = F.pad(xt, (padding[2], padding[3], padding[0], padding[1])), 0
    yt = F.conv2d(xin, w, b, stride, pad, dilation, groups)
    yt.backward(torch.from_numpy(dy.transpose(0, 3, 1, 2).copy()))
    np.testing.assert_allclose(y, yt.detach().numpy().transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(dx, xt.grad.numpy().transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(conv.weight.grad, w.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(conv.bias.grad, b.grad.numpy(), rtol=1e-12, atol=1e-13)
    check_layer(conv, x, samples=12)
