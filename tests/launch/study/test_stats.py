"""Intervals, verdicts and provenance of a study's rows: exact values."""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from launch.study.claims import Claim, claim_from_dict, judge
from launch.study.provenance import code_state, comparable_config, file_sha256, mismatches
from launch.study.stats import Interval, difference_interval, mean_interval, t_quantile

# two-sided 95 % and 99 % quantiles of Student's t (standard tables)
T95 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 9: 2.2622, 10: 2.2281, 20: 2.0860,
       30: 2.0423, 100: 1.9840}
T99 = {1: 63.6567, 2: 9.9248, 5: 4.0321, 30: 2.7500}


def test_t_quantiles_match_the_tables():
    for df, t in T95.items():
        assert t_quantile(0.95, df) == pytest.approx(t, abs=5e-5), df
    for df, t in T99.items():
        assert t_quantile(0.99, df) == pytest.approx(t, abs=5e-5), df
    with pytest.raises(ValueError, match="positive integer"):
        t_quantile(0.95, 0)


def test_mean_interval_exact():
    i = mean_interval([0.80, 0.82, 0.84])
    assert (i.mean, i.sd, i.n) == (pytest.approx(0.82), pytest.approx(0.02), 3)
    half = 4.3027 * 0.02 / math.sqrt(3)
    assert (i.low, i.high) == (pytest.approx(0.82 - half, abs=1e-6), pytest.approx(0.82 + half, abs=1e-6))
    one = mean_interval([0.5])
    assert one.n == 1 and math.isnan(one.low) and math.isnan(one.sd)


def test_welch_difference_interval():
    a, b = [0.90, 0.92, 0.94], [0.80, 0.81, 0.85, 0.86]
    d = difference_interval(a, b)
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)
    assert 4 < df < 5  # rounded down to 4
    assert d.mean == pytest.approx(np.mean(a) - np.mean(b))
    assert d.high - d.mean == pytest.approx(2.7764 * math.sqrt(va + vb), rel=1e-4)


@pytest.mark.parametrize("low, high, above, below, verdict", [
    (-0.4, 0.8, -0.5, None, "holds"),       # inside d > -0.5
    (-0.6, 0.8, -0.5, None, "undecided"),   # straddles the bound
    (-2.0, -0.7, -0.5, None, "refuted"),    # wholly outside
    (-0.3, -0.1, None, 0.0, "holds"),
    (0.1, 0.4, None, 0.0, "refuted"),
    (-0.2, 0.2, -0.5, 0.5, "holds"),        # a band
    (0.4, 0.9, -0.5, 0.5, "undecided"),
    (0.6, 0.9, -0.5, 0.5, "refuted"),
])
def test_verdicts(low, high, above, below, verdict):
    claim = Claim("a", "b", above=above, below=below)
    assert judge(claim, Interval(0.5 * (low + high) / 100, 0.0, 3, low / 100, high / 100)) == verdict


def test_no_interval_is_undecided_and_claims_are_checked():
    assert judge(Claim("a", "b", above=0.0), Interval(0.1, math.nan, 1, math.nan, math.nan)) == "undecided"
    with pytest.raises(ValueError, match="unknown key 'within'"):
        claim_from_dict({"arm": "a", "reference": "b", "within": 1}, "c")
    with pytest.raises(ValueError, match="metric='loss'"):
        claim_from_dict({"arm": "a", "reference": "b", "above": 0, "metric": "loss"}, "c")
    with pytest.raises(ValueError, match="must be below"):
        claim_from_dict({"arm": "a", "reference": "b", "above": 1, "below": 0}, "c")


def _expected(**over):
    base = {"code": {"commit": "a" * 40, "dirty": False, "diff_sha256": ""}, "data_sha256": "d" * 64,
            "config": {"data": {"path": "x.h5", "micro_batch": 4}, "run": {"run_dir": "/r/1", "epochs": 2}}}
    base.update(over)
    return base


def _row(expected):
    return {**expected["code"], "data_sha256": expected["data_sha256"], "config": expected["config"]}


def test_provenance_matches_only_when_code_data_and_config_do():
    e = _expected()
    row = _row(e)
    assert mismatches(row, e) == []
    moved = {**row, "config": {"data": {"path": "/elsewhere/x.h5", "micro_batch": 4}, "run": {"run_dir": "z", "epochs": 2}}}
    assert mismatches(moved, e) == []  # where the data and the run live is not what they are
    assert mismatches({**row, "commit": "b" * 40}, e) == [f"commit {'b' * 12} (now {'a' * 12})"]
    assert mismatches({**row, "dirty": True, "diff_sha256": "f"}, e) == ["uncommitted changes differ"]
    assert mismatches({**row, "data_sha256": "0" * 64}, e) == [f"data sha256 {'0' * 12} (now {'d' * 12})"]
    longer = {**row, "config": {"data": {"path": "x.h5", "micro_batch": 4}, "run": {"run_dir": "/r/1", "epochs": 4}}}
    assert mismatches(longer, e) == ["config run.epochs"]
    assert mismatches({"id": "old"}, e) == ["no provenance recorded"]
    unknown = _expected(code={"commit": "unknown", "dirty": False, "diff_sha256": ""})
    assert mismatches(_row(unknown), unknown) != []  # no commit: nothing proves the code is the same
    assert comparable_config(e["config"]) == {"data": {"micro_batch": 4}, "run": {"epochs": 2}}


def test_code_state_and_file_hash(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.py").write_text("a = 1\n")
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    clean = code_state(repo)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False and clean["diff_sha256"] == ""
    (repo / "f.py").write_text("a = 2\n")
    dirty = code_state(repo)
    assert dirty["commit"] == clean["commit"] and dirty["dirty"] and len(dirty["diff_sha256"]) == 64
    (repo / "f.py").write_text("a = 3\n")
    assert code_state(repo)["diff_sha256"] != dirty["diff_sha256"]
    (repo / "docs").mkdir()
    (repo / "docs" / "d.md").write_text("x\n")
    subprocess.run([*git, "add", "docs/d.md", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "d"], check=True)
    (repo / "docs" / "d.md").write_text("regenerated\n")
    assert code_state(repo)["dirty"] is False  # docs/ (the regenerated tables and rows) is not code
    assert code_state(tmp_path / "nowhere")["commit"] == "unknown"
    import hashlib
    assert file_sha256(repo / "f.py") == hashlib.sha256(b"a = 3\n").hexdigest()
