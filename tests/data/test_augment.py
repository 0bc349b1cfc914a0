import numpy as np
import pytest

from data.augment import AugmentConfig, augment_batch, augment_params, resized_crop


def _src(n=6, h=12, w=10, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, c), dtype=np.uint8)


def test_params_depend_only_on_seed_epoch_and_sample_id():
    config = AugmentConfig()
    boxes, flips = augment_params(np.array([5, 9, 2]), 1, 3, (32, 24), config)
    again_b, again_f = augment_params(np.array([2, 5]), 1, 3, (32, 24), config)
    assert np.array_equal(boxes[[2, 0]], again_b) and np.array_equal(flips[[2, 0]], again_f)
    other_epoch, _ = augment_params(np.array([5, 9, 2]), 1, 4, (32, 24), config)
    assert not np.array_equal(boxes, other_epoch)


def test_boxes_respect_scale_ratio_and_bounds():
    config = AugmentConfig(scale=(0.25, 0.5), ratio=(0.5, 2.0))
    boxes, flips = augment_params(np.arange(2000), 0, 0, (40, 60), config)
    y0, x0, h, w = boxes.T
    assert (y0 >= 0).all() and (x0 >= 0).all() and (y0 + h <= 40).all() and (x0 + w <= 60).all()
    area = h * w / 2400.0
    assert area.min() > 0.2 and area.max() < 0.56  # rounding of h and w widens the range slightly
    assert 0.45 < flips.mean() < 0.55
    assert not AugmentConfig(flip=False).flip
    _, no_flips = augment_params(np.arange(50), 0, 0, (8, 8), AugmentConfig(flip=False))
    assert not no_flips.any()


def test_full_box_without_flip_is_the_identity_and_flip_mirrors():
    src = _src()
    boxes = np.tile([0, 0, 12, 10], (6, 1))
    dst = np.empty_like(src)
    resized_crop(src, np.arange(6), boxes, np.zeros(6, bool), dst, 0.5)
    assert np.array_equal(dst, src)
    resized_crop(src, np.arange(6), boxes, np.ones(6, bool), dst, 0.5)
    assert np.array_equal(dst, src[:, :, ::-1])


def test_integer_crop_at_same_size_is_a_slice():
    src = _src()
    boxes = np.tile([3, 2, 5, 4], (6, 1))
    dst = np.empty((6, 5, 4, 3), np.uint8)
    resized_crop(src, np.arange(6)[::-1].copy(), boxes, np.zeros(6, bool), dst, 0.5)
    assert np.array_equal(dst, src[::-1, 3:8, 2:6])


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="scale"):
        AugmentConfig(scale=(0.5, 1.5))
    with pytest.raises(ValueError, match="ratio"):
        AugmentConfig(ratio=(2.0, 1.0))


def test_resize_matches_torch_bilinear():
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    src = _src(n=4, h=20, w=17)
    boxes = np.array([[0, 0, 20, 17], [3, 2, 9, 13], [5, 4, 15, 7], [1, 1, 4, 5]])
    flips = np.array([False, True, False, True])
    dst = np.empty((4, 11, 14, 3), np.float64)
    resized_crop(src, np.arange(4), boxes, flips, dst, 0.0)
    for i, (y0, x0, h, w) in enumerate(boxes):
        crop = torch.from_numpy(src[i, y0:y0 + h, x0:x0 + w].astype(np.float64)).permute(2, 0, 1)[None]
        ref = functional.interpolate(crop, size=(11, 14), mode="bilinear", align_corners=False)[0].permute(1, 2, 0)
        ref = ref.numpy()[:, ::-1] if flips[i] else ref.numpy()
        np.testing.assert_allclose(dst[i], ref, rtol=0, atol=1e-9)
    as_uint8 = np.empty((4, 11, 14, 3), np.uint8)
    resized_crop(src, np.arange(4), boxes, flips, as_uint8, 0.5)
    assert np.array_equal(as_uint8, np.floor(dst + 0.5).astype(np.uint8))


def test_augment_batch_uses_rows_and_sample_ids():
    src = _src(n=8, h=16, w=16)
    config = AugmentConfig(out_size=(8, 8))
    a = np.empty((3, 8, 8, 3), np.uint8)
    b = np.empty((3, 8, 8, 3), np.uint8)
    augment_batch(src, np.array([7, 1, 4]), np.array([7, 1, 4]), 5, 0, config, a)
    augment_batch(src[[7, 1, 4]], np.arange(3), np.array([7, 1, 4]), 5, 0, config, b)  # same samples, other storage
    assert np.array_equal(a, b)
