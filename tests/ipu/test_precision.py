import os
import subprocess
import sys

import numpy as np
import pytest

from ipu.precision import PRECISIONS, get_precision, stochastic_round_to_fp16, stochastic_round_to_fp16_


def _neighbours(x):
    """The float16 values just below and above |x| (x not exactly representable)."""
    lo = np.float16(x)
    lo = np.where(lo.astype(np.float64) > x, np.nextafter(lo, np.float16(-np.inf)), lo)
    return lo.astype(np.float64), np.nextafter(lo, np.float16(np.inf)).astype(np.float64)


def test_rounds_to_one_of_the_two_neighbours():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-6, 4, 10_000)).astype(np.float32)
    y = stochastic_round_to_fp16(x, rng).astype(np.float64)
    lo, hi = _neighbours(np.abs(x).astype(np.float64))
    mag = np.abs(y)
    exact = np.float16(x).astype(np.float32) == x
    assert np.all(exact | (mag == lo) | (mag == hi))
    assert np.all(np.sign(y[y != 0]) == np.sign(x[y != 0]))


@pytest.mark.parametrize("frac", [0.1, 0.25, 0.5, 0.9])
def test_probability_of_rounding_up_is_proportional_to_proximity(frac):
    ulp = 2.0**-10  # float16 spacing in [1, 2)
    x = np.full(200_000, 1.0 + (3 + frac) * ulp, dtype=np.float32)
    y = stochastic_round_to_fp16(x, 123).astype(np.float64)
    up = np.mean(y == 1.0 + 4 * ulp)
    sigma = np.sqrt(frac * (1 - frac) / x.size)
    assert abs(up - frac) < 5 * sigma


def test_unbiased_where_round_to_nearest_is_biased():
    """Mean error over many draws is 0 within 5 standard errors, for values across the range."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0.001, 1000.0, 64).astype(np.float32)
    draws = np.stack([stochastic_round_to_fp16(x, seed).astype(np.float64) for seed in range(2000)])
    lo, hi = _neighbours(x.astype(np.float64))
    ulp = hi - lo
    err = (draws.mean(axis=0) - x) / ulp
    stderr = draws.std(axis=0) / np.sqrt(len(draws)) / ulp + 1e-12
    assert np.all(np.abs(err) < 5 * stderr + 1e-9)
    nearest = (np.float16(x).astype(np.float64) - x) / ulp
    assert np.abs(nearest).mean() > 10 * np.abs(err).mean()


def test_subnormals_overflow_and_specials():
    tiny = np.full(100_000, 2.0**-25, dtype=np.float32)  # half the smallest subnormal 2**-24
    y = stochastic_round_to_fp16(tiny, 5).astype(np.float64)
    assert set(np.unique(y)) == {0.0, 2.0**-24}
    assert abs(y.mean() / 2.0**-25 - 1) < 0.02
    special = np.array([np.inf, -np.inf, np.nan, 0.0, 70000.0, -1e6], dtype=np.float32)
    out = stochastic_round_to_fp16(special, 0)
    assert np.isposinf(out[0]) and np.isneginf(out[1]) and np.isnan(out[2]) and out[3] == 0
    assert np.isposinf(out[4]) and np.isneginf(out[5])


def test_same_seed_same_result_and_out_is_written():
    x = np.linspace(-3, 3, 1001, dtype=np.float32).reshape(7, 11, 13)
    out = np.empty(x.shape, np.float16)
    first = stochastic_round_to_fp16(x, 42, out=out)
    assert first is out
    np.testing.assert_array_equal(stochastic_round_to_fp16(x, 42), out)
    assert not np.array_equal(stochastic_round_to_fp16(x, 43), out)
    with pytest.raises(ValueError, match="out must be float16"):
        stochastic_round_to_fp16(x, 1, out=np.empty(x.shape, np.float32))


def test_16_16_update_moves_weights_by_less_than_half_an_ulp_on_average():
    w = np.ones(4096, np.float32)
    delta = np.full(4096, 1e-4, np.float32)  # < half of float16's 2**-10 spacing at 1.0
    for update in range(100):
        w += delta
        assert stochastic_round_to_fp16_(w, update) is w
    assert np.array_equal(w, w.astype(np.float16).astype(np.float32))  # float16 values, stored as float32
    assert w.astype(np.float64).mean() == pytest.approx(1.01, abs=0.001)
    nearest = np.ones(4096, np.float16)
    for _ in range(100):
        nearest = (nearest.astype(np.float32) + delta).astype(np.float16)
    assert np.all(nearest == 1.0)  # round-to-nearest stalls


def test_modes_and_bad_name():
    assert [PRECISIONS[m].half_compute for m in ("32.32", "16.32", "16.16")] == [False, True, True]
    with pytest.raises(ValueError, match="32.32, 16.32, 16.16"):
        get_precision("8.8")


def test_a_batch_rounds_bitwise_as_one_call_per_array_and_follows_replaced_arrays():
    from ipu.precision import Float16Batch, round_to_fp16_
    from tests.ipu.oracles import rounding_seed

    rng = np.random.default_rng(11)

    def arrays():
        # normals, float16 subnormals, zeros, an overflow, and a 2-D array
        return [rng.standard_normal(n).astype(np.float32) * s for n, s in ((1000, 1.0), (37, 1e-6), (5, 0.0))] + [
            np.array([7e4, -1e5, 3.0], np.float32), rng.standard_normal((9, 4)).astype(np.float32)]

    batch = Float16Batch()
    for update in (0, 1, 7):
        got = arrays()
        want = [a.copy() for a in got]
        batch.stochastic_round_(got, seed=5, update=update)
        for k, a in enumerate(want):
            stochastic_round_to_fp16_(a, rounding_seed(5, update, k))
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
        got = arrays()  # new arrays: the batch rebinds
        want = [round_to_fp16_(a.copy()) for a in got]
        batch.round_(got)
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
    strided = np.arange(12, dtype=np.float32)[::2] + np.float32(0.3)  # not contiguous: the per-array path
    want = strided.astype(np.float16).astype(np.float32)
    batch.round_([strided])
    np.testing.assert_array_equal(strided, want)


def _tie_patterns() -> np.ndarray:
    """Both signs, every float32 exponent (zero, subnormals, inf and nan included), 64 leading
    mantissa patterns, and the 13 bits a float16 normal drops at and around the tie."""
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF], np.uint32)
    top = np.arange(0, 1 << 10, 16, dtype=np.uint32) << np.uint32(13)
    exp = np.arange(256, dtype=np.uint32) << np.uint32(23)
    bits = (np.array([0, 1 << 31], np.uint32)[:, None, None, None] | exp[:, None, None] | top[:, None] | low)
    return bits.reshape(-1).view(np.float32)


def test_round_to_nearest_matches_numpys_cast_at_every_exponent_and_tie():
    from ipu.precision import round_to_fp16_

    x = _tie_patterns()
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = round_to_fp16_(x.copy())
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


def test_round_to_nearest_uncompiled_matches_the_compiled_kernel():
    from ipu.precision import round_to_fp16_

    x = _tie_patterns()[::7]  # every exponent still
    code = ("import sys, numpy as np; from ipu.precision import round_to_fp16_; "
            "x = np.frombuffer(sys.stdin.buffer.read(), np.float32).copy(); "
            "sys.stdout.buffer.write(round_to_fp16_(x).tobytes())")
    out = subprocess.run([sys.executable, "-c", code], input=x.tobytes(), capture_output=True, check=True,
                         env={**os.environ, "POPRUN_JIT": "0"}).stdout
    np.testing.assert_array_equal(np.frombuffer(out, np.uint32), round_to_fp16_(x.copy()).view(np.uint32))
