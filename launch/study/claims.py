"""A study's claims, written in ``studies.yml`` before it runs, and their verdicts.

A claim is a statement about the difference ``d = metric(arm at batch) - metric(reference at its batch)``
in percentage points, over the fresh seeds of each chosen configuration: ``d > above``, ``d < below``, or
both (a band). Its verdict comes from the 95 % Welch interval of ``d``:

* **holds**: the whole interval lies inside the claimed region,
* **refuted**: the whole interval lies outside it,
* **undecided**: the interval straddles a bound (or fewer than two seeds on a side).

Each claim also says where its bound comes from (``margin_from``: the source's own claim, or the test
split's resolution, ``launch.study.sweep.resolution``), and may state the effect it is planned for
(``effect``, points, with ``effect_from``: where that number comes from) for the power of its seeds
(``launch.study.power``). One claim per study is ``primary``; the others are one family, Holm-corrected
(``launch.study.holm``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from launch.study.stats import Interval

VERDICTS = ("holds", "refuted", "undecided")
METRICS = ("test_accuracy", "final_val_accuracy")


@dataclass(frozen=True)
class Claim:
    arm: str
    reference: str
    batch: int = 0  # 0: the arm's first batch
    reference_batch: int = 0
    above: float | None = None  # points
    below: float | None = None
    metric: str = "test_accuracy"
    says: str = ""
    primary: bool = False
    margin_from: str = ""  # where the bound comes from
    effect: float | None = None  # the difference (points) the seeds are planned to decide
    effect_from: str = ""

    def bounds(self) -> tuple[float, float]:
        """(low, high) of the claimed region in points (infinite where open)."""
        return (-math.inf if self.above is None else self.above, math.inf if self.below is None else self.below)

    def region(self) -> str:
        if self.above is not None and self.below is not None:
            return f"{self.above:+g} < d < {self.below:+g} points"
        return f"d > {self.above:+g} points" if self.above is not None else f"d < {self.below:+g} points"


def claim_from_dict(raw: dict, where: str) -> Claim:
    keys = ("arm", "reference", "batch", "reference_batch", "above", "below", "metric", "says", "primary", "margin_from",
            "effect", "effect_from")
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; a claim has {', '.join(keys)}")
    if "arm" not in raw or "reference" not in raw:
        raise ValueError(f"{where}: a claim names an arm and its reference arm")
    if raw.get("above") is None and raw.get("below") is None:
        raise ValueError(f"{where}: give above and/or below (points of the difference arm - reference)")
    claim = Claim(arm=str(raw["arm"]), reference=str(raw["reference"]), batch=int(raw.get("batch", 0)),
                  reference_batch=int(raw.get("reference_batch", 0)),
                  above=None if raw.get("above") is None else float(raw["above"]),
                  below=None if raw.get("below") is None else float(raw["below"]),
                  metric=str(raw.get("metric", "test_accuracy")), says=str(raw.get("says", "")).strip(),
                  primary=bool(raw.get("primary", False)), margin_from=str(raw.get("margin_from", "")).strip(),
                  effect=None if raw.get("effect") is None else float(raw["effect"]),
                  effect_from=str(raw.get("effect_from", "")).strip())
    if claim.effect is not None and not claim.effect_from:
        raise ValueError(f"{where}: effect {claim.effect:g} needs effect_from (where the planned difference comes from)")
    if claim.metric not in METRICS:
        raise ValueError(f"{where}.metric={claim.metric!r} must be one of {', '.join(METRICS)}")
    if claim.above is not None and claim.below is not None and not claim.above < claim.below:
        raise ValueError(f"{where}: above ({claim.above}) must be below below ({claim.below})")
    return claim


def judge(claim: Claim, d: Interval) -> str:
    """The verdict on ``claim`` from the interval ``d`` of the difference (fractions, not points)."""
    lo, hi = 100 * d.low, 100 * d.high
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    bounds_lo, bounds_hi = claim.bounds()
    if bounds_lo < lo and hi < bounds_hi:
        return "holds"
    if hi <= bounds_lo or lo >= bounds_hi:
        return "refuted"
    return "undecided"


__all__ = ["Claim", "METRICS", "VERDICTS", "claim_from_dict", "judge"]
