"""The power of a claim for the planned seeds: how often its verdict would be decided.

For a true difference ``effect`` between two arms whose test accuracy spreads with standard deviation
``sd`` over seeds, Welch's interval of ``n_a`` and ``n_b`` seeds has the standard error
``se = sd sqrt(1/n_a + 1/n_b)`` and Welch's degrees of freedom for equal spreads. A bound ``b`` of the
claimed region is cleared on the side of ``effect`` when the interval's end lies beyond it; with the
non-centrality ``(effect - b) / se`` and the interval's factor ``t_c`` (``stats.t_quantile``), that
happens with probability about ``P(T > t_c - (effect - b) / se)`` (Student's t shifted by the
non-centrality: the usual approximation of the non-central t, exact as ``df`` grows). The claim's
verdict is then

* **holds** with the probability that the interval clears every bound inside the region (for a band
  the sum of both bounds' failures is taken off, a lower bound),
* **refuted** with the probability that it lies wholly outside, across one bound,

and the power is their sum: the chance the study decides the claim at all. A secondary claim's
interval is taken at the Bonferroni level ``1 - alpha / m`` of its family of ``m``: Holm's first step,
so its power under Holm is at least this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from launch.study.claims import Claim
from launch.study.stats import t_quantile, t_upper, welch_df


@dataclass(frozen=True)
class Power:
    holds: float  # probability of the verdict holds
    refuted: float
    se: float  # points
    df: int
    level: float

    @property
    def decided(self) -> float:
        return self.holds + self.refuted


def claim_power(claim: Claim, effect: float, sd: float, n_a: int, n_b: int, level: float = 0.95) -> Power:
    """The chance of each verdict on ``claim`` when the true difference is ``effect`` points and each arm's
    test accuracy spreads by ``sd`` points over seeds, with ``n_a`` and ``n_b`` seeds and ``level`` intervals."""
    if n_a < 2 or n_b < 2:
        raise ValueError(f"power with {n_a} and {n_b} seeds: give each arm at least 2 fresh seeds (seeds per arm in "
                         "studies.yml)")
    if not sd > 0.0:
        raise ValueError(f"power with spread {sd!r}: give a positive standard deviation in points (spread: in "
                         "studies.yml, or fresh-seed rows on record)")
    va, vb = sd * sd / n_a, sd * sd / n_b
    se, df = math.sqrt(va + vb), welch_df(va, n_a, vb, n_b)
    t_c = t_quantile(level, df)
    low, high = claim.bounds()
    clear_low = t_upper(t_c - (effect - low) / se, df) if math.isfinite(low) else 1.0  # interval above low
    below_low = t_upper(t_c + (effect - low) / se, df) if math.isfinite(low) else 0.0  # interval under low
    clear_high = t_upper(t_c + (effect - high) / se, df) if math.isfinite(high) else 1.0  # interval under high
    above_high = t_upper(t_c - (effect - high) / se, df) if math.isfinite(high) else 0.0
    holds = max(0.0, 1.0 - (1.0 - clear_low) - (1.0 - clear_high))
    return Power(holds, below_low + above_high, se, df, level)


def claim_level(claim: Claim, claims: tuple[Claim, ...], alpha: float = 0.05) -> float:
    """The interval level a claim's power is computed at: ``1 - alpha`` for the primary claim, the Bonferroni
    level ``1 - alpha / m`` for one of ``m`` secondary claims."""
    if claim.primary:
        return 1.0 - alpha
    return 1.0 - alpha / max(sum(not c.primary for c in claims), 1)


def pooled_sd(groups: list[list[float]]) -> tuple[float, int]:
    """The pooled standard deviation of several groups' values (each group its own mean) and the number of
    groups with two values or more; nan and 0 when none has."""
    used = [g for g in groups if len(g) >= 2]
    if not used:
        return math.nan, 0
    ss = sum(sum((x - sum(g) / len(g)) ** 2 for x in g) for g in used)
    return math.sqrt(ss / sum(len(g) - 1 for g in used)), len(used)


__all__ = ["Power", "claim_level", "claim_power", "pooled_sd"]
