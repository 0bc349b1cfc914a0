"""The direct path's weight layouts (models/kernels/weight_layout.py) against the numpy expressions
they replace, bitwise, on one thread and on numba's threads."""

import numpy as np
import pytest

from models.kernels import weight_layout as WL


def weights(g=40, cog=16, cg=8, kh=5, kw=3, seed=0):  # 76,800 values: over the one-thread threshold
    return np.random.default_rng(seed).standard_normal((g, cog, cg, kh, kw)).astype(np.float32)


@pytest.mark.parametrize("g", [1, 40])
def test_to_taps_is_the_transposed_copy(g):
    w = weights(g)
    out = np.empty((g, 5, 3, 8, 16), np.float32)
    WL.to_taps(w, out)
    assert np.array_equal(out, w.transpose(0, 3, 4, 2, 1))


@pytest.mark.parametrize("rows,cols", [(slice(None, None, -1), slice(None, None, -1)),  # stride 1: flipped
                                       (slice(3, None, -2), slice(2, 0, -2)),  # a stride-2 phase
                                       (slice(4, None, -2), slice(1, None, -2))])
def test_input_grad_taps_are_one_phase_flipped_and_transposed(rows, cols):
    w = weights()
    want = np.ascontiguousarray(w.transpose(0, 3, 4, 1, 2)[:, rows][:, :, cols])
    (r0, _, rs), (c0, _, cs) = rows.indices(5), cols.indices(3)
    out = np.empty(want.shape, np.float32)
    WL.to_input_grad_taps(w, out, r0, rs, c0, cs)
    assert np.array_equal(out, want)
    padded = np.zeros((*want.shape[:4], 16), np.float32)  # a stem's channels padded: a strided view
    WL.to_input_grad_taps(w, padded[..., :8], r0, rs, c0, cs)
    assert np.array_equal(padded[..., :8], want) and not padded[..., 8:].any()


@pytest.mark.parametrize("parts", [1, 2, 7])
def test_from_taps_adds_the_partials_in_numpys_order(parts):
    rng = np.random.default_rng(parts)
    p = (rng.standard_normal((parts, 40, 5, 3, 8, 16)) * 10.0 ** rng.integers(-3, 4, (parts, 1, 1, 1, 1, 16))
         ).astype(np.float32)  # magnitudes far apart: another order of the additions rounds differently
    out = np.empty((40, 16, 8, 5, 3), np.float32)
    WL.from_taps(p, out)
    assert out.tobytes() == np.ascontiguousarray(p.sum(axis=0).transpose(0, 4, 3, 1, 2)).tobytes()
    if parts > 2:  # the data tell the order apart: added last to first, some sums round otherwise
        assert not np.array_equal(p[::-1].sum(axis=0), p.sum(axis=0))
