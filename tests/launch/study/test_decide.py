"""What decides a claim: its power for the planned seeds, Holm's correction, the paired comparisons on the
same test images, the sweep's ties, and notes that may not state a verdict of their own; every expected
value worked by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from launch.study.claims import Claim
from launch.study.holm import across_ties, claim_p, corrected, holm
from launch.study.notes import check_notes, expand_notes
from launch.study.paired import decode, encode, mcnemar, paired_bootstrap
from launch.study.power import claim_level, claim_power, pooled_sd
from launch.study.sweep import choose_lr, chosen_rates, resolution, tied_rates


# Student's t with 2 degrees of freedom in closed form: P(|T| < t) = t / sqrt(2 + t^2)
def _upper2(t: float) -> float:
    return 0.5 * (1.0 - t / math.sqrt(2.0 + t * t))


T95_2 = math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2))  # solves t / sqrt(2 + t^2) = 0.95: 4.302653


def test_power_against_the_closed_form_of_two_degrees_of_freedom():
    # sd 1, 2 seeds an arm: se = sqrt(1/2 + 1/2) = 1, Welch df = 2; claim d > -5, true effect 0: ncp = 5
    pw = claim_power(Claim("a", "b", above=-5.0), effect=0.0, sd=1.0, n_a=2, n_b=2)
    assert (pw.se, pw.df) == (1.0, 2)
    assert pw.holds == pytest.approx(_upper2(T95_2 - 5.0), abs=1e-9)  # P(T > -0.697) = (1 + 0.6973 / 1.5768) / 2
    assert pw.refuted == pytest.approx(_upper2(T95_2 + 5.0), abs=1e-9)  # P(T > 9.30) = 0.0057
    assert pw.holds == pytest.approx(0.721128, abs=1e-6)
    # the same bound as d < -5 swaps the two verdicts
    below = claim_power(Claim("a", "b", below=-5.0), effect=0.0, sd=1.0, n_a=2, n_b=2)
    assert (below.holds, below.refuted) == pytest.approx((pw.refuted, pw.holds), abs=1e-12)


def test_power_of_the_issue_s_lars_deficit_grows_with_the_seeds():
    # the issue's planning: a -1.10 point deficit against a -0.5 bound, seeds spread 0.4 points
    claim = Claim("lars", "baseline", above=-0.5)
    assert claim_power(claim, -1.10, 0.4, 3, 3).refuted == pytest.approx(0.20, abs=0.01)
    assert claim_power(claim, -1.10, 0.4, 8, 8).refuted == pytest.approx(0.80, abs=0.01)
    assert claim_power(claim, 0.0, 0.4, 3, 3).holds == pytest.approx(0.14, abs=0.01)  # equal arms: 10-20 %


def test_power_levels_and_errors():
    claims = (Claim("a", "b", above=0, primary=True), Claim("a", "c", above=0), Claim("a", "d", above=0))
    assert claim_level(claims[0], claims) == 0.95 and claim_level(claims[1], claims) == pytest.approx(1 - 0.05 / 2)
    with pytest.raises(ValueError, match="at least 2 fresh seeds"):
        claim_power(claims[0], 0.0, 1.0, 1, 3)
    with pytest.raises(ValueError, match="positive standard deviation"):
        claim_power(claims[0], 0.0, 0.0, 3, 3)
    sd, used = pooled_sd([[1.0, 3.0], [2.0, 2.0, 5.0], [7.0]])  # sums of squares 2 + 6 over 1 + 2 dof
    assert used == 2 and sd == pytest.approx(math.sqrt(8 / 3))


def test_holm_adjusts_step_down_in_the_order_given():
    # sorted 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, held at 0.06 by the step before)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5] and holm([0.6, 0.6]) == [1.0, 1.0]


def test_claim_p_matches_the_interval_and_holm_leaves_the_primary_alone():
    # d = 5, se 1, df 2, bound 0 (d > 0): z = 5; p = 2 P(T > 5) toward holds
    p, side = claim_p(Claim("a", "b", above=0.0), 5.0, 1.0, 2)
    assert side == "holds" and p == pytest.approx(2 * _upper2(5.0), abs=1e-12)  # 0.0377: the 95 % interval clears 0
    p2, side2 = claim_p(Claim("a", "b", below=0.0), 5.0, 1.0, 2)
    assert side2 == "refuted" and p2 == pytest.approx(p)
    assert claim_p(Claim("a", "b", above=0.0), 5.0, math.nan, 0) == (1.0, "undecided")
    band = claim_p(Claim("a", "b", above=-1.0, below=1.0), 0.0, 1.0, 2)  # inside a band: the weaker bound decides
    assert band == (pytest.approx(2 * _upper2(1.0)), "holds")
    claims = [Claim("a", "b", above=0, primary=True), Claim("a", "c", above=0), Claim("a", "d", above=0)]
    tests = [(0.04, "holds"), (0.02, "holds"), (0.04, "refuted")]
    # the primary keeps 0.04 < 0.05; the family of two: 0.02 x 2 = 0.04 decided, then 0.04 x 1 -> 0.04 decided
    assert corrected(claims, tests) == [(0.04, "holds"), (pytest.approx(0.04), "holds"), (pytest.approx(0.04), "refuted")]
    tests = [(0.04, "holds"), (0.03, "holds"), (0.04, "refuted")]  # 0.03 x 2 = 0.06: the step-down stops there
    assert [v for _, v in corrected(claims, tests)] == ["holds", "undecided", "undecided"]


def test_a_kept_tie_decides_only_where_every_rate_agrees():
    assert across_ties([(0.01, "refuted"), (0.03, "refuted")]) == (0.03, "refuted")
    assert across_ties([(0.01, "refuted"), (0.01, "holds")]) == (1.0, "undecided")
    assert across_ties([(0.01, "refuted"), (1.0, "undecided")]) == (1.0, "undecided")


def test_predictions_round_trip_compactly():
    classes = np.array([0, 9, 3, 3, 255])
    stored = encode(classes)
    assert stored["dtype"] == "uint8" and stored["base64"] == "AAkDA/8=" and (decode(stored) == classes).all()
    assert encode(np.array([300]))["dtype"] == "uint16" and decode(encode(np.array([300, 1]))).tolist() == [300, 1]
    with pytest.raises(ValueError, match="one non-negative class per image"):
        encode(np.array([-1]))


def test_paired_bootstrap_against_a_hand_worked_case():
    # one seed each, 10 images; the arms differ on image 9 only: a replicate's difference is k / 10, k ~ Bin(10, 0.1)
    a = np.ones((1, 10))
    b = np.ones((1, 10))
    b[0, 9] = 0
    out = paired_bootstrap(a, b, replicates=4000, seed=0)
    assert out.mean == pytest.approx(0.1)
    # P(k = 0) = 0.9^10 = 0.349 > 2.5 %: the low end is 0; P(k <= 2) = 0.930 < 97.5 % <= P(k <= 3) = 0.987: 0.3
    assert (out.low, out.high) == (0.0, pytest.approx(0.3))
    # the seeds are resampled too: arm a's two seeds are all right and all wrong, so a replicate's mean is 0, 1/2 or 1
    both = paired_bootstrap(np.array([[1.0, 1.0], [0.0, 0.0]]), np.zeros((1, 2)), replicates=2000, seed=0)
    assert both.mean == 0.5 and (both.low, both.high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="the same images in both"):
        paired_bootstrap(np.ones((1, 3)), np.ones((1, 4)))


def test_mcnemar_exact():
    a = np.array([1] * 1 + [0] * 9 + [1] * 5, bool)  # right alone on 1 image, wrong alone on 9, both right on 5
    b = np.array([0] * 1 + [1] * 9 + [1] * 5, bool)
    assert mcnemar(a, b) == (1, 9, pytest.approx(2 * (1 + 10) / 1024))  # 2 P(X <= 1), X ~ Bin(10, 1/2)
    assert mcnemar(a, a) == (0, 0, 1.0)


def _sweep(accs, losses=None, images=2000):
    losses = losses or [1 - a for a in accs]
    return [{"lr": lr, "status": "ok", "final_val_accuracy": acc, "final_val_loss": loss, "validation_images": images}
            for lr, acc, loss in zip((0.025, 0.05, 0.1, 0.2, 0.4), accs, losses)]


def test_ties_within_the_validation_resolution():
    assert resolution(0.8625, 2000) == pytest.approx(math.sqrt(0.8625 * 0.1375 / 2000))  # 0.0077: 0.77 points
    # study 2's momentum SGD at 8B: four rates within 7 of 2,000 images, the fifth diverged
    rows = _sweep([0.8625, 0.8625, 0.8605, 0.8590, 0.4410], losses=[0.40, 0.41, 0.39, 0.42, 2.0])
    assert tied_rates(rows) == [0.025, 0.05, 0.1, 0.2]
    assert choose_lr(rows, "best") == (0.025, True)  # equal accuracy: the lower loss
    assert choose_lr(rows, "loss") == (0.1, False)  # the lowest loss among the tied
    assert chosen_rates(rows, "keep") == [0.025, 0.05, 0.1, 0.2] and chosen_rates(rows, "best") == [0.025]
    assert tied_rates(_sweep([0.86, 0.85], images=2000)) == [0.025]  # 1 point apart: no tie at 2,000 images
    assert tied_rates(_sweep([0.86, 0.855], images=2000)) == [0.025, 0.05]
    with pytest.raises(ValueError, match="ties='coin'"):
        choose_lr(rows, "coin")


def test_notes_state_no_verdict_of_their_own():
    assert check_notes("- {claim 1}\n  - The plane holds 57.5 % of the variance.") == []
    bad = check_notes("LARS did not buy an 8x batch here.\n- Adam: refuted.\nok line")
    assert [b.split(":")[0] for b in bad] == ["line 1", "line 2"]
    with pytest.raises(ValueError, match=r"write \{claim N\}.*line 1: \"did not\""):
        expand_notes("LARS did not buy an 8x batch here.", {})

    class R:  # a judged claim, as launch.study.verdicts.judge_claims gives it
        claim, verdict = Claim("a", "b", above=-1, primary=True, says="a is within 1 point of b"), "undecided"

    text = expand_notes("- {claim 1}", {"base": [R()]})
    assert text == '- claim 1 ("a is within 1 point of b", primary): **undecided**, the measurements do not decide it'
    with pytest.raises(ValueError, match="claims 1 to 1"):
        expand_notes("{claim 2}", {"base": [R()]})
