"""Intervals over seeds: mean, sample standard deviation and a Student-t confidence interval.

The t quantile is exact for integer degrees of freedom: the two-sided probability ``P(|T| < t)`` of
Student's distribution has a closed form in ``theta = atan(t / sqrt(df))`` (Abramowitz and Stegun 26.7.3
and 26.7.4: a finite series in ``cos(theta)``), inverted by bisection. A difference of two means takes
Welch's interval, its Welch-Satterthwaite degrees of freedom rounded down (the interval a little wider).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def t_two_sided(t: float, df: int) -> float:
    """``P(|T| < t)`` for Student's t with ``df`` (a positive integer) degrees of freedom."""
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom {df!r}: a positive integer")
    if t <= 0.0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2.4/(3.5) cos^4 + ...)), df - 2 terms in cos
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * c2
            total += term
        return 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/(2.4) cos^4 + ...)
    for k in range(1, df // 2):
        term *= (2 * k - 1) / (2 * k) * c2
        total += term
    return s * total


def t_upper(t: float, df: int) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (one tail)."""
    p = t_two_sided(abs(t), df)
    return 0.5 * (1.0 - p) if t >= 0 else 0.5 * (1.0 + p)


def t_quantile(level: float, df: int) -> float:
    """The ``t`` with ``P(|T| < t) = level``: the half-width factor of a two-sided ``level`` interval."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level!r} must be in (0, 1)")
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) < level:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_two_sided(mid, df) < level else (lo, mid)
        if hi - lo < 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values with its standard deviation and ``level`` interval [low, high] (nan below n = 2)."""

    mean: float
    sd: float
    n: int
    low: float
    high: float
    level: float = 0.95

    @property
    def half_width(self) -> float:
        return 0.5 * (self.high - self.low)


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The t interval of the mean of ``values`` (n - 1 degrees of freedom)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], np.float64)
    n = len(v)
    if n == 0:
        return Interval(math.nan, math.nan, 0, math.nan, math.nan, level)
    mean = float(v.mean())
    if n == 1:
        return Interval(mean, math.nan, 1, math.nan, math.nan, level)
    sd = float(v.std(ddof=1))
    half = t_quantile(level, n - 1) * sd / math.sqrt(n)
    return Interval(mean, sd, n, mean - half, mean + half, level)


def welch_df(va: float, na: int, vb: float, nb: int) -> int:
    """Welch-Satterthwaite degrees of freedom of a difference of two means with squared standard errors
    ``va``, ``vb`` over ``na``, ``nb`` values, rounded down (at least 1)."""
    if va + vb == 0.0:
        return max(na + nb - 2, 1)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    return max(int(math.floor(df)), 1)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, int]:
    """(``mean(a) - mean(b)``, its standard error, Welch's degrees of freedom); nan and 0 below two values a side."""
    x, y = mean_interval(a), mean_interval(b)
    if x.n < 2 or y.n < 2:
        return x.mean - y.mean, math.nan, 0
    va, vb = x.sd ** 2 / x.n, y.sd ** 2 / y.n
    return x.mean - y.mean, math.sqrt(va + vb), welch_df(va, x.n, vb, y.n)


def difference_interval(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Interval:
    """Welch's interval of ``mean(a) - mean(b)`` (``sd`` is its standard error, ``n`` the smaller sample)."""
    n = min(mean_interval(a).n, mean_interval(b).n)
    diff, se, df = welch(a, b)
    if not math.isfinite(se):
        return Interval(diff, math.nan, n, math.nan, math.nan, level)
    if se == 0.0:
        return Interval(diff, 0.0, n, diff, diff, level)
    half = t_quantile(level, df) * se
    return Interval(diff, se, n, diff - half, diff + half, level)


__all__ = ["Interval", "difference_interval", "mean_interval", "t_quantile", "t_two_sided", "t_upper", "welch",
           "welch_df"]
