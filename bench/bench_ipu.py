"""Speed of the simulated IPU's hot paths, each against a named baseline measured in the same run.

    .venv/bin/python bench/bench_ipu.py [--size 4000000] [--repeats 5]

1. stochastic rounding to float16: ``ipu.precision.stochastic_round_to_fp16`` (numba, one pass,
   counter-based random numbers) vs a vectorised numpy version (uniform draws, nextafter).
2. predicting a preset: ``ipu.cost.prediction.predict`` + ``ipu.memory.fit`` on the real B4 profile vs
   building that profile (the cost of asking ``models`` for it).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ipu.cost.prediction import predict
from ipu.memory import fit
from ipu.plan import PRESETS, load_profile
from ipu.precision import stochastic_round_to_fp16


def numpy_stochastic_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Baseline: round toward zero to float16, then step away from zero with probability frac."""
    a = np.abs(x.astype(np.float64))
    lo = np.abs(x.astype(np.float16)).astype(np.float64)
    lo = np.where(lo > a, np.nextafter(lo.astype(np.float16), np.float16(0)).astype(np.float64), lo)
    hi = np.nextafter(lo.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    up = rng.random(x.shape) < (a - lo) / np.where(hi > lo, hi - lo, 1.0)
    return np.copysign(np.where(up, hi, lo), x).astype(np.float16)


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(args.size) * 3).astype(np.float32)
    out = np.empty(x.shape, np.float16)
    stochastic_round_to_fp16(x[:10], 0)  # compile / load the numba cache outside the timing
    ours = best_of(lambda: stochastic_round_to_fp16(x, 1, out=out), args.repeats)
    base = best_of(lambda: numpy_stochastic_round(x, rng), args.repeats)
    mean_err = float(np.mean(out.astype(np.float64) - x))
    print(f"stochastic rounding of {args.size:,} floats: numba {ours * 1e3:.1f} ms, numpy baseline "
          f"{base * 1e3:.1f} ms -> {base / ours:.1f}x faster ({args.size / ours / 1e6:.0f} M/s); "
          f"mean error {mean_err:.2e}")
    plan = PRESETS["g16-b4-pod256"]
    profile = load_profile(plan)
    build = best_of(lambda: load_profile(plan), 2)
    model = best_of(lambda: (fit(plan, profile), predict(plan, profile)), args.repeats)
    print(f"memory fit + cost prediction for {len(profile)} layers: {model * 1e3:.1f} ms, "
          f"building the profile (baseline) {build * 1e3:.1f} ms -> ratio {build / model:.2f}")


if __name__ == "__main__":
    main()
