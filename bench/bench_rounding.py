"""Float16 rounding of float32 arrays (``ipu.precision``), against numpy's cast, and an exhaustive check.

    .venv/bin/python bench/bench_rounding.py [--millions 0.127] [--repeats 200] [--exhaustive]

What the 16.16 emulation rounds every update (``ipu/runtime/emulation.py``): the gradient partials
and the optimizer state to nearest, the weights stochastically. Times, on ``--millions`` float32
values spread over float16's range (the default is the default job's 126,678 parameters), the
median of ``--repeats`` calls of:

* round to nearest in place (``round_to_fp16_``), against the baseline ``numpy cast``: the same
  result through ``x.astype(float16)`` and back into float32 (``copyto`` both ways, no allocation);
* stochastic rounding in place (``stochastic_round_to_fp16_``), against the same numpy cast, which
  it has to beat only by so much: it draws a 64-bit hash per value.

``--exhaustive`` also rounds all 2**32 float32 bit patterns to nearest, by ours and by numpy's
cast, and counts the differences (nan counts as equal to nan; 8 minutes on Zen 1, mostly numpy's cast).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_models import _cpu_model  # noqa: E402
from ipu.precision import round_to_fp16_, stochastic_round_to_fp16_  # noqa: E402


def _median_us(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e6


def _numpy_round_trip(x: np.ndarray, half: np.ndarray) -> None:
    with np.errstate(over="ignore"):
        np.copyto(half, x, casting="unsafe")
    np.copyto(x, half)


def exhaustive(chunk: int = 1 << 25) -> int:
    """Bit patterns whose nearest-float16 rounding differs between ours and numpy's cast (nan = nan)."""
    differ = 0
    ours = np.empty(chunk, np.uint32)
    for start in range(0, 1 << 32, chunk):
        ours[:] = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32)
        floats = ours.view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            want = floats.astype(np.float16).astype(np.float32)
        round_to_fp16_(floats)
        same = (floats.view(np.uint32) == want.view(np.uint32)) | (np.isnan(floats) & np.isnan(want))
        differ += int(chunk - np.count_nonzero(same))
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--millions", type=float, default=0.126678, help="float32 values per call")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--exhaustive", action="store_true", help="also compare all 2**32 float32 patterns")
    args = parser.parse_args()
    n = max(1, int(args.millions * 1e6))
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(n) * 10.0 ** rng.uniform(-8, 4, n)).astype(np.float32)
    x, half = values.copy(), np.empty(n, np.float16)
    print(f"CPU: {_cpu_model()}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; "
          f"{n:,} float32 values, median of {args.repeats} calls, one thread")
    base = _median_us(lambda: _numpy_round_trip(x, half), args.repeats)
    rn = _median_us(lambda: round_to_fp16_(x), args.repeats)
    sr = _median_us(lambda: stochastic_round_to_fp16_(x, 7), args.repeats)
    print(f"{'':<28}{'us':>9}{'ns/value':>10}{'numpy cast / ours':>19}")
    for name, us in (("numpy cast (baseline)", base), ("round to nearest", rn), ("stochastic rounding", sr)):
        print(f"{name:<28}{us:>9.0f}{us * 1e3 / n:>10.2f}{base / us:>18.2f}x")
    if args.exhaustive:
        start = time.perf_counter()
        differ = exhaustive()
        print(f"all 2**32 float32 patterns rounded to nearest: {differ} differ from numpy's cast "
              f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
