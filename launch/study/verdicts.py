"""A study's claims judged from its rows: Welch's interval and the Holm-corrected verdict, the paired
comparisons on the same test images, the tie each arm's rate came from, the margin's source beside the
test split's resolution, and the power of the planned seeds. The lines here are the report's claims
section, and the only place its verdicts are written in words (:func:`verdict_phrase`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from launch.study.claims import Claim
from launch.study.grid import Study
from launch.study.holm import ALPHA, across_ties, claim_p, corrected
from launch.study.paired import decode, mcnemar, paired_bootstrap
from launch.study.power import claim_level, claim_power, pooled_sd
from launch.study.stats import Interval, difference_interval, welch
from launch.study.sweep import resolution

PHRASES = {"holds": "the measurements support it", "refuted": "the measurements contradict it",
           "undecided": "the measurements do not decide it"}


def verdict_phrase(verdict: str) -> str:
    """What a verdict lets a sentence say, and no more."""
    return PHRASES[verdict]


@dataclass(frozen=True)
class ClaimResult:
    index: int  # 1-based, in the study file's order
    claim: Claim
    pairs: tuple[tuple, ...]  # (summary of the arm, summary of the reference) per combination of kept ties
    welch: tuple[Interval, ...]  # 95 % Welch interval of each pair (fractions)
    p: float  # before correction, across kept ties
    side: str
    judged_p: float  # the primary's own, a secondary's Holm-adjusted
    verdict: str


def _find(summaries, variant, arm: str, batch: int, role: str = "chosen") -> list:
    mine = [s for s in summaries if s.group.variant == variant and s.group.arm.name == arm and s.role == role]
    if batch:
        return [s for s in mine if s.group.batch == batch]
    first = mine[0].group.batch if mine else None
    return [s for s in mine if s.group.batch == first]


def _test(claim: Claim, a, b) -> tuple[Interval, tuple[float, str]]:
    x, y = a.values(claim.metric), b.values(claim.metric)
    diff, se, df = welch(x, y)
    return difference_interval(x, y), claim_p(claim, 100 * diff, 100 * se, df)


def judge_claims(study: Study, summaries, variant) -> list[ClaimResult]:
    """Every claim of the study in ``variant``, with its verdict after Holm's correction."""
    found = []
    for claim in study.claims:
        pairs = tuple(itertools.product(_find(summaries, variant, claim.arm, claim.batch),
                                        _find(summaries, variant, claim.reference, claim.reference_batch)))
        tests = [_test(claim, a, b) if a.rows and b.rows else (Interval(math.nan, math.nan, 0, math.nan, math.nan),
                                                                (1.0, "undecided")) for a, b in pairs]
        found.append((claim, pairs, tuple(t[0] for t in tests), across_ties([t[1] for t in tests])))
    judged = corrected([c for c, *_ in found], [t for *_, t in found])
    return [ClaimResult(i + 1, c, pairs, w, t[0], t[1], jp, v)
            for i, ((c, pairs, w, t), (jp, v)) in enumerate(zip(found, judged))]


# -- words ------------------------------------------------------------------------------------
def _pts(i: Interval) -> str:
    return f"{100 * i.mean:+.2f} points, 95 % interval [{100 * i.low:+.2f}, {100 * i.high:+.2f}]"


def claim_lines(study: Study, summaries, variant, alternates=()) -> list[str]:
    """One bullet per claim: what it says, its region and margin, Welch's interval, the corrected verdict, and
    under it the paired comparisons, the ties and the power."""
    results = judge_claims(study, summaries, variant)
    family = sum(not c.primary for c in study.claims)
    lines = []
    for r in results:
        c = r.claim
        role = "primary" if c.primary else f"secondary, Holm over {family}"
        split = "test" if c.metric == "test_accuracy" else "validation"
        a, b = (r.pairs[0] if r.pairs else (None, None))
        what = (f"d = {study.arm(c.arm).label} (batch {a.group.batch if a else '?'}) - "
                f"{study.arm(c.reference).label} (batch {b.group.batch if b else '?'}), {split} accuracy")
        measured = "; ".join(
            f"{_pts(w)} (Welch, {len(x.rows)} and {len(y.rows)} seeds{_rates(x, y, len(r.pairs))})"
            if math.isfinite(w.low) else f"not measured{_rates(x, y, len(r.pairs))[1:]} (missing runs, or fewer than two "
            "seeds on a side)" for w, (x, y) in zip(r.welch, r.pairs)) or \
            "not measured (missing runs, or fewer than two seeds on a side)"
        p = "" if r.side == "undecided" else (f"; p = {r.p:.3g} toward {r.side}" + (
            f", Holm-adjusted {r.judged_p:.3g}" if not c.primary else ""))
        lines.append(f"- Claim {r.index} ({role}){': ' + c.says if c.says else ''} ({what}; claimed {c.region()}): "
                     f"{measured}{p} -> **{r.verdict}**: {verdict_phrase(r.verdict)} at {100 * (1 - ALPHA):.0f} %"
                     f"{'' if c.primary else ' within its family'}.")
        lines += ["  - " + x for x in margin_lines(c, r.pairs)]
        lines += ["  - " + x for x in dict.fromkeys(paired_lines(c, r.pairs))]
        lines += ["  - " + x for x in tie_lines(study, c, r, summaries, variant, alternates)]
        lines.append("  - " + power_text(study, summaries, variant, c))
    return lines


def _rates(x, y, n: int) -> str:
    return f"; rates {x.lr:.4g} and {y.lr:.4g}" if n > 1 else ""


def margin_lines(claim: Claim, pairs) -> list[str]:
    """Where the bound comes from, beside the test split's resolution at the arms' accuracy."""
    margins = sorted({abs(b) for b in claim.bounds() if math.isfinite(b)})
    src = claim.margin_from or "not stated in studies.yml"
    rows = [row for a, b in pairs[:1] for row in (*a.rows, *b.rows) if row.get("test_images")]
    head = (f"No margin ({src})" if margins == [0.0] else
            f"Margin {', '.join(f'{m:g}' for m in margins)} point{'' if margins == [1.0] else 's'}: {src}")
    if claim.metric != "test_accuracy" or not rows:
        return [head + "."]
    acc = float(np.mean([row["test_accuracy"] for row in rows]))
    res = 100 * resolution(acc, int(rows[0]["test_images"]))
    below = [m for m in margins if 0 < m < res]
    return [head + f". The test split resolves {res:.2f} points "
            f"(one binomial standard error of {100 * acc:.1f} % on {int(rows[0]['test_images']):,} images)"
            + (": the margin lies below it, finer than one evaluation can show." if below else ".")]


# -- paired comparisons ------------------------------------------------------------------------
_LABELS: dict[tuple, np.ndarray | None] = {}


def test_labels(row: dict) -> np.ndarray | None:
    """The test split's labels of a row's dataset, where the file is on this machine."""
    from data.split import open_split
    from launch.study.meta import local_path

    cfg = row.get("config", {}).get("data", {})
    key = (cfg.get("path"), row.get("validation_fraction"), row.get("split_seed"))
    if key not in _LABELS:
        path = local_path(cfg["path"]) if cfg.get("path") else ""
        if not path or not Path(path).exists():
            _LABELS[key] = None
        else:
            d = open_split(path, "test", float(row["validation_fraction"]), int(row["split_seed"]))
            _LABELS[key] = np.asarray(d.labels).copy()
            d.close()
    return _LABELS[key]


def correctness(rows) -> tuple[np.ndarray | None, str]:
    """Seeds x images 0/1 of the rows' test predictions, or None and why not."""
    if not rows or any("test_predictions" not in r for r in rows):
        return None, "the rows hold no per-image test predictions (recorded from this version on)"
    labels = test_labels(rows[0])
    if labels is None:
        return None, "the test split's labels are not on this machine"
    out = []
    for r in rows:
        predicted = decode(r["test_predictions"])
        if predicted.shape != labels.shape or abs(float(np.mean(predicted == labels)) - r["test_accuracy"]) > 1e-9:
            return None, f"{r['id']}'s predictions do not give its test accuracy"
        out.append(predicted == labels)
    return np.array(out), ""


def paired_lines(claim: Claim, pairs) -> list[str]:
    lines = []
    if claim.metric != "test_accuracy":
        return lines
    for a, b in pairs:
        if not (a.rows and b.rows):
            continue
        (ca, why_a), (cb, why_b) = correctness(a.rows), correctness(b.rows)
        if ca is None or cb is None:
            lines.append(f"Paired comparison unavailable: {why_a or why_b}.")
            continue
        boot = paired_bootstrap(ca, cb)
        seeds = sorted({r["seed"] for r in a.rows} & {r["seed"] for r in b.rows})
        mc = [(s, *mcnemar(ca[[r["seed"] for r in a.rows].index(s)], cb[[r["seed"] for r in b.rows].index(s)]))
              for s in seeds]
        lines.append(f"Paired on the same {ca.shape[1]:,} test images: bootstrap over images and seeds "
                     f"{100 * boot.mean:+.2f} points, 95 % [{100 * boot.low:+.2f}, {100 * boot.high:+.2f}] "
                     f"({boot.replicates} replicates); McNemar per seed (only this arm right, only the reference "
                     "right, p): " + ", ".join(f"seed {s}: {x}/{y}, {p:.2g}" for s, x, y, p in mc) + ".")
    return lines


# -- ties ---------------------------------------------------------------------------------------
def tie_lines(study: Study, claim: Claim, result: ClaimResult, summaries, variant, alternates) -> list[str]:
    """The ties the claim's two arms were chosen from, and the claim with each tied rate that has fresh rows."""
    lines = []
    for arm, batch in ((claim.arm, claim.batch), (claim.reference, claim.reference_batch)):
        mine = _find(summaries, variant, arm, batch)
        if not mine or not mine[0].tie:
            continue
        s = mine[0]
        rule = study.ties_of(s.group.arm)
        lines.append(f"{s.group.arm.label}: its sweep tied {', '.join(f'{x:.4g}' for x in s.tie)} within the "
                     f"validation split's resolution; " + ("each trained on the fresh seeds (ties: keep)." if
                                                           rule == "keep" else
                                                           f"{s.lr:.4g} chosen by the rule declared in advance "
                                                           f"(ties: {rule})."))
        for alt in _find(alternates, variant, arm, batch, role="alternate"):
            other = _find(summaries, variant, claim.reference if arm == claim.arm else claim.arm,
                          claim.reference_batch if arm == claim.arm else claim.batch)
            if not other:
                continue
            x, y = (alt, other[0]) if arm == claim.arm else (other[0], alt)
            w, (p, side) = _test(claim, x, y)
            lines.append(f"With the tied {alt.lr:.4g} instead ({len(alt.rows)} fresh seeds on record): "
                         f"{_pts(w) if math.isfinite(w.low) else 'not measured'}, uncorrected p = {p:.3g} toward "
                         f"{side}.")
    return lines


# -- power --------------------------------------------------------------------------------------
def planning_spread(study: Study, summaries, variant, claim: Claim, rows_from: str) -> tuple[float, str]:
    """(sd in points, where it comes from): the pooled seed spread of the claim's two arms on record, else the
    study's declared ``spread``."""
    groups = [100 * np.asarray(s.values(claim.metric)) for arm, batch in ((claim.arm, claim.batch),
                                                                         (claim.reference, claim.reference_batch))
              for s in _find(summaries, variant, arm, batch)[:1]]
    sd, used = pooled_sd([list(g) for g in groups])
    if used == 2:
        return sd, f"pooled over both arms' {sum(len(g) for g in groups)} fresh-seed rows {rows_from}"
    return study.spread, (f"declared: {study.spread_from}" if study.spread_from else "declared in studies.yml")


def power_lines(study: Study, summaries: list, out: Path | str = "") -> list[str]:
    """Each claim's power for the planned seeds of its two arms (``summaries``: ``report.summarise`` of the rows on
    record): the stated effect, the spread, and where each comes from."""
    variant = study.variants[0]
    lines = [f"Power of {study.name}'s claims for the planned seeds (P(holds) + P(refuted) = the chance the study "
             "decides the claim; Welch intervals; the primary at 95 %, a secondary at the Bonferroni level of its "
             "family):"]
    where = f"in {out}" if out else "on record"
    return lines + [f"  claim {i} ({'primary' if c.primary else 'secondary'}, {c.region()}): "
                    + power_text(study, summaries, variant, c, where) for i, c in enumerate(study.claims, 1)]


def power_text(study: Study, summaries, variant, c: Claim, where: str = "on record") -> str:
    """One claim's power for the planned seeds of its two arms, with where the effect and the spread come from."""
    n_a, n_b = len(study.seeds_of(study.arm(c.arm))), len(study.seeds_of(study.arm(c.reference)))
    head = f"Power for the planned {n_a} and {n_b} fresh seeds: "
    if c.effect is None:
        return head + "no effect stated (effect: in studies.yml), not computed."
    sd, sd_from = planning_spread(study, summaries, variant, c, where)
    if not (math.isfinite(sd) and sd > 0) or n_a < 2 or n_b < 2:
        return head + (f"effect {c.effect:+g} points ({c.effect_from}); no spread to plan with (spread: in studies.yml) "
                       "or fewer than 2 seeds an arm, not computed.")
    pw = claim_power(c, c.effect, sd, n_a, n_b, claim_level(c, study.claims))
    return head + (f"effect {c.effect:+g} points ({c.effect_from}); spread {sd:.2f} points ({sd_from}); at "
                   f"{100 * pw.level:.1f} %: P(holds) {pw.holds:.2f}, P(refuted) {pw.refuted:.2f}, power {pw.decided:.2f}.")


__all__ = ["ClaimResult", "claim_lines", "judge_claims", "power_lines", "verdict_phrase"]
