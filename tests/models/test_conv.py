"""Conv2d: exact padding arithmetic, forward against a direct float64 sum, gradient checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.models.gradcheck import check_layer
from models.kernels import direct_conv as D
from models.conv import Conv2d, resolve_padding, same_pads


def direct_conv(x, w, stride, pads, groups):
    """Reference: pad, then sum over taps with einsum per group. x NHWC, w OIHW."""
    pt, pb, pl, pr = pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    cout, cg, kh, kw = w.shape
    n, hp, wp, _ = xp.shape
    ho, wo = (hp - kh) // stride + 1, (wp - kw) // stride + 1
    y = np.zeros((n, ho, wo, cout))
    cog = cout // groups
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        patch = xp[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, g * cg:(g + 1) * cg]
        y[..., g * cog:(g + 1) * cog] += np.einsum("nhwc,oc->nhwo", patch, w[g * cog:(g + 1) * cog, :, i, j])
    return y


def test_same_padding_matches_tensorflow():
    assert same_pads(7, 3, 2) == (1, 1)
    assert same_pads(8, 3, 2) == (0, 1)
    assert same_pads(8, 5, 2) == (1, 2)
    assert same_pads(5, 1, 1) == (0, 0)
    assert resolve_padding("symmetric", 5, 3, 2, 2, 9, 9) == (2, 2, 1, 1)
    assert resolve_padding((0, 1, 2, 0), 3, 3, 1, 1, 9, 9) == (0, 1, 2, 0)


def test_bad_groups_and_padding_are_reported():
    with pytest.raises(ValueError, match="groups=3"):
        Conv2d("c", "b", 8, 8, 3, groups=3)
    with pytest.raises(ValueError, match="padding"):
        Conv2d("c", "b", 8, 8, 3, padding="valid-ish")
    with pytest.raises(ValueError, match="8 channels"):
        Conv2d("c", "b", 8, 8, 3).forward(np.zeros((1, 4, 4, 3), np.float32), True)


# (cin, cout, groups): regular, grouped, depthwise, grouped with 16 channels per group (G16; with 8 groups
# on these small maps its weight gradient goes by groups, D.group_weight_grad), an RGB stem
CHANNELS = [(3, 5, 1), (4, 6, 2), (6, 6, 6), (32, 32, 2), (128, 128, 8), (3, 16, 1)]
GRID = list(itertools.product(CHANNELS, [1, 2, 3, 5], [1, 2], ["same", "symmetric", (0, 1, 2, 0)]))


@pytest.mark.parametrize("channels,kernel,stride,padding", GRID)
def test_conv_forward_and_gradients(channels, kernel, stride, padding):
    cin, cout, groups = channels
    rng = np.random.default_rng(kernel * 10 + stride)
    conv = Conv2d("c", "b", cin, cout, kernel, stride, padding, groups, bias=kernel == 3, dtype=np.float64, rng=rng)
    if conv.bias is not None:
        conv.bias.data[:] = rng.standard_normal(cout)
    x = rng.standard_normal((2, 7, 6, cin))
    pads = resolve_padding(padding, kernel, kernel, stride, stride, 7, 6)
    expected = direct_conv(x, conv.weight.data, stride, pads, groups)
    if conv.bias is not None:
        expected += conv.bias.data
    np.testing.assert_allclose(conv.forward(x, True), expected, rtol=1e-12, atol=1e-12)
    check_layer(conv, x, samples=6)


@pytest.mark.parametrize("channels", CHANNELS + [(8, 16, 1)])
def test_float32_matches_float64(channels):
    cin, cout, groups = channels
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 9, 9, cin))
    for kernel in (1, 3):
        c64 = Conv2d("c", "b", cin, cout, kernel, 1, "same", groups, dtype=np.float64, rng=np.random.default_rng(1))
        c32 = Conv2d("c", "b", cin, cout, kernel, 1, "same", groups, dtype=np.float32, rng=np.random.default_rng(1))
        y64, y32 = c64.forward(x, True), c32.forward(x.astype(np.float32), True)
        np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-5)
        g = rng.standard_normal(y64.shape)
        np.testing.assert_allclose(c32.backward(g.astype(np.float32)), c64.backward(g), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c32.weight.grad, c64.weight.grad, rtol=1e-5, atol=1e-4)


def test_pointwise_path_is_one_gemm_and_depthwise_path_is_chosen():
    assert Conv2d("c", "b", 8, 16, 1).path == "pointwise"
    assert Conv2d("c", "b", 8, 8, 3, groups=8).path == "depthwise"
    assert Conv2d("c", "b", 32, 32, 3, groups=2).path == "direct"
    assert Conv2d("c", "b", 64, 64, 3).path == "im2col"
    assert Conv2d("c", "b", 24, 24, 3).path == "direct"  # a small regular conv (8-channel blocks)
    assert Conv2d("c", "b", 3, 32, 3, stride=2).path == "direct"  # an RGB stem
    assert Conv2d("c", "b", 8, 16, 1, stride=2).path == "direct"
    assert Conv2d("c", "b", 4, 6, 3, groups=2).path == "im2col"  # group widths not multiples of 8


@pytest.mark.parametrize("stride", [1, 2])
def test_direct_weight_gradient_over_ragged_row_blocks(monkeypatch, stride):
    """The direct kernel's weight gradient fills its scratch a block of output rows at a time
    (``D.BLOCK_PIXELS``); blocks that do not divide the map (a short last block) sum the same."""
    rng = np.random.default_rng(3)
    conv = Conv2d("c", "b", 32, 32, 3, stride, "symmetric", 2, dtype=np.float64, rng=rng)
    assert conv.path == "direct"
    x = rng.standard_normal((2, 11, 9, 32))
    dy = rng.standard_normal(conv.forward(x, True).shape)
    conv.backward(dy)
    whole = conv.weight.grad.copy()  # one block per image (11 rows of 9 or 5 pixels fit in one)
    monkeypatch.setattr(D, "BLOCK_PIXELS", 2 * dy.shape[2])  # blocks of 2 rows: 11 -> 2+2+2+2+2+1, 6 -> 2+2+2
    conv.forward(x, True)
    conv.backward(dy)
    np.testing.assert_allclose(conv.weight.grad, whole, rtol=1e-12, atol=1e-12)


def test_the_tile_is_the_one_that_computes_the_row_in_the_least_time():
    # 3 pixels only where they save columns enough for their 10 % more time per pixel; ties: the narrower
    avx2 = D.tile_table((16, 8))
    assert [D.tile_for(16, wo, avx2) for wo in (1, 2, 3, 4, 5, 6, 7, 9, 12, 14, 56)] == [3, 3, 3, 4, 6, 6, 4, 3, 4, 4, 4]
    assert [D.tile_for(8, wo, avx2) for wo in (1, 16, 48)] == [6, 6, 6]
    avx512 = D.tile_table((32, 16))  # wider tiles where the 32 registers hold them
    assert [D.tile_for(16, wo, avx512) for wo in (3, 6, 7, 12, 14, 24, 48, 56)] == [3, 6, 7, 12, 7, 8, 8, 8]


def test_the_tap_view_holds_an_output_pixels_taps_in_one_run():
    scratch = np.arange(2 * 7 * 3, dtype=np.float32).reshape(2, 7, 3)  # [rows, width, Cg]
    taps = D.tap_view(scratch, 3)
    assert taps.shape == (2, 5, 9)
    for row, col in [(0, 0), (1, 2), (1, 4)]:
        np.testing.assert_array_equal(taps[row, col], scratch[row, col:col + 3].reshape(-1))  # (kw, c) order


def test_the_weight_gradient_block_is_the_largest_divisor_of_the_taps_in_the_register_file():
    avx2, avx512 = (16, 8), (32, 16)  # 12 ymm accumulators; 24 zmm
    assert [D.tap_block(16, taps, registers=avx2) for taps in (48, 80, 16, 9, 7, 96)] == [6, 5, 4, 3, 1, 6]  # 3x3, 5x5, 1x1, stem
    assert [D.tap_block(8, taps, registers=avx2) for taps in (24, 40, 9, 96)] == [12, 10, 9, 12]
    assert [D.tap_block(16, taps, itemsize=8, registers=avx2) for taps in (48, 80, 9, 7)] == [3, 2, 3, 1]  # float64
    assert [D.tap_block(16, taps, registers=avx512) for taps in (48, 80, 16, 9, 96)] == [24, 20, 16, 9, 24]
    assert [D.tap_block(8, taps, registers=avx512) for taps in (24, 40, 96)] == [24, 20, 24]
    assert [D.tap_block(16, taps, itemsize=8, registers=avx512) for taps in (48, 80)] == [12, 10]
