"""Many claims, one error rate: each claim's p-value and Holm's step-down correction.

A claim's verdict at level ``alpha`` (``launch.study.claims.judge`` on the ``1 - alpha`` interval) is a
test of its bound ``b``: with ``z = (d - b) / se`` on Welch's degrees of freedom, the data favour
**holds** with the one-sided p ``P(T > z)`` (for ``d > b``; ``P(T > -z)`` for ``d < b``; a band takes
the larger of its two bounds') and **refuted** with the other tail (a band: the smaller). The claim's
p-value is twice the smaller of the two, capped at 1, and its side is the verdict it leans to: ``p <
alpha`` exactly when the ``1 - alpha`` interval lies wholly on that side of the bound.

A study has one primary claim, judged at ``alpha`` alone; the others are one family, corrected by Holm:
sorted by p, the k-th smallest of ``m`` is compared with ``alpha / (m - k + 1)`` and the first that fails
stops the rest (adjusted p: ``max_{j<=k} min(1, (m - j + 1) p_(j))``). So the chance of any wrong
decided verdict is at most ``alpha`` within the family, and at most ``2 alpha`` over the study.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from launch.study.claims import Claim
from launch.study.stats import t_upper

ALPHA = 0.05


def claim_p(claim: Claim, diff: float, se: float, df: int) -> tuple[float, str]:
    """(p-value, side) of ``claim`` for the difference ``diff`` with standard error ``se`` on ``df``
    degrees of freedom, all in points; (1, "undecided") where there is no standard error."""
    if not (math.isfinite(diff) and math.isfinite(se)) or df < 1:
        return 1.0, "undecided"
    low, high = claim.bounds()
    holds, refuted = [], []
    for bound, inside_above in ((low, True), (high, False)):
        if not math.isfinite(bound):
            continue
        if se == 0.0:
            z = math.copysign(math.inf, diff - bound) if diff != bound else 0.0
        else:
            z = (diff - bound) / se
        p_above, p_below = (t_upper(z, df), t_upper(-z, df)) if math.isfinite(z) else (float(z < 0), float(z > 0))
        holds.append(p_above if inside_above else p_below)
        refuted.append(p_below if inside_above else p_above)
    p_holds, p_refuted = max(holds), min(refuted)
    side = "holds" if p_holds < p_refuted else "refuted"
    return min(1.0, 2.0 * min(p_holds, p_refuted)), side


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * m, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def corrected(claims: Sequence[Claim], tests: Sequence[tuple[float, str]],
              alpha: float = ALPHA) -> list[tuple[float, str]]:
    """(p-value as judged, verdict) of every claim: the primary's own p, the others' Holm-adjusted within their
    family; the verdict is the side where that p is below ``alpha``, else undecided."""
    family = [i for i, c in enumerate(claims) if not c.primary]
    adjusted = dict(zip(family, holm([tests[i][0] for i in family])))
    out = []
    for i, (p, side) in enumerate(tests):
        judged = adjusted.get(i, p)
        out.append((judged, side if judged < alpha and side != "undecided" else "undecided"))
    return out


def across_ties(tests: Sequence[tuple[float, str]]) -> tuple[float, str]:
    """One claim measured with each of several tied candidates: decided only where every one leans the same
    way (the largest p of them; an intersection-union test), else p = 1."""
    if not tests:
        return 1.0, "undecided"
    sides = {side for _, side in tests}
    if len(sides) != 1:
        return 1.0, "undecided"
    return max(p for p, _ in tests), sides.pop()


__all__ = ["ALPHA", "across_ties", "claim_p", "corrected", "holm"]
