"""The study grid's pure parts: batch splits, POD splits, learning-rate rules and sweeps, spec errors."""

from __future__ import annotations

import math

import pytest

from launch.study.grid import (choose_lr, count_points, groups, load_study, make_point, pod_split, scaled_lr,
                               split_batch, study_from_dict, sweep_candidates, variants_of, widened_candidate)
from launch.study.trajectory import grid_axes, pca_plane, snapshot_every


def test_split_batch_exact():
    assert split_batch(8, 2, 128) == (4, 1)
    assert split_batch(2048, 2, 128) == (128, 8)
    assert split_batch(256, 2, 16) == (16, 8)
    assert split_batch(96, 4, 16) == (12, 2)  # largest divisor of 24 up to 16
    assert split_batch(7, 1, 4) == (1, 7)


def test_split_batch_refuses_uneven():
    with pytest.raises(ValueError, match="multiple of the replicas"):
        split_batch(10, 4, 8)


def test_pod_split_exact():
    assert pod_split(8, 16, 1, 128) == (8, 1, 1)
    assert pod_split(2048, 16, 1, 128) == (16, 128, 1)
    assert pod_split(2048, 16, 1, 16) == (16, 16, 8)
    assert pod_split(32, 16, 2, 16) == (8, 4, 1)  # 2 IPUs per replica: 8 replicas on 16 IPUs
    assert pod_split(12, 16, 1, 16) == (4, 3, 1)  # replicas a power of two that divides the batch


def test_scaled_lr():
    assert scaled_lr("fixed", 0.1, 32, 2048) == 0.1
    assert scaled_lr("linear", 0.05, 32, 256) == pytest.approx(0.4)
    assert scaled_lr("sqrt", 0.1, 32, 8) == pytest.approx(0.05)


def _study(**over):
    raw = {"base": "dense", "seeds": [1, 2, 3], "target_accuracy": 0.8, "batches": [8, 32], "replicas": 2,
           "validation_fraction": 0.2,
           "arms": {"sgd": {"lr": {"rule": "sqrt", "base_lr": 0.1, "base_batch": 32, "factors": [0.25, 1, 4]}},
                    "big": {"batches": [256], "lr": {"rule": "linear", "from_arm": "sgd", "base_batch": 32}}}}
    raw.update(over)
    return study_from_dict("t", raw)


def test_sweep_candidates_and_counts():
    study = _study()
    g8, g32, g256 = groups(study)
    assert sweep_candidates(study, g8) == [0.0125, 0.05, 0.2]
    assert sweep_candidates(study, g32) == [0.025, 0.1, 0.4]
    assert sweep_candidates(study, g256, base_lr=0.1, base_batch=32) == [0.8]
    assert count_points(study) == 2 * (3 + 3) + 3  # sweep candidates with the sweep seed, then 3 fresh seeds
    p = make_point(study, g8, 0.05, 1, "seeds")
    assert (p.micro_batch, p.grad_accum, p.replicas) == (4, 1, 2)
    assert p.id == "base/sgd/b8/lr0.05/s1"


def test_choose_lr_best_accuracy_and_edge():
    rows = [{"lr": 0.1, "status": "ok", "final_val_accuracy": 0.8, "final_val_loss": 0.5},
            {"lr": 0.3, "status": "ok", "final_val_accuracy": 0.85, "final_val_loss": 0.4},
            {"lr": 1.0, "status": "failed"}]
    assert choose_lr(rows) == (0.3, False)
    assert choose_lr(rows[:2]) == (0.3, True)
    assert choose_lr(rows[2:]) is None


def test_widened_candidate_one_grid_step_past_the_end_of_the_best():
    rows = [{"lr": lr} for lr in (0.1, 0.2, 0.4)]
    assert widened_candidate(rows, (0.4, True)) == 0.8
    assert widened_candidate(rows, (0.1, True)) == 0.05
    assert widened_candidate(rows, (0.2, False)) is None
    assert widened_candidate(rows + [{"lr": 0.8}], (0.8, True)) == 1.6


def test_a_sweep_widens_until_its_best_is_inside(monkeypatch):
    """The run trains one candidate more beyond the end where the best sits, up to ``widen`` times, and the
    fresh seeds train at the widened sweep's winner."""
    from launch.study import cli

    study = _study(batches=[32], seeds=[1], arms={"sgd": {"lr": {"base_lr": 0.1, "factors": [0.5, 1, 2], "widen": 3}}})
    accuracy = {0.05: 0.70, 0.1: 0.75, 0.2: 0.80, 0.4: 0.85, 0.8: 0.82, 1.6: 0.5}
    trained = []

    def execute(self, point):
        trained.append((point.phase, point.lr))
        return {"id": point.id, "lr": point.lr, "status": "ok", "final_val_accuracy": accuracy[point.lr],
                "final_val_loss": 1 - accuracy[point.lr]}

    monkeypatch.setattr(cli.StudyRun, "execute", execute)
    run = object.__new__(cli.StudyRun)
    run.study, run.chosen, run.lead, run.total = study, {}, False, 6
    run.run_group(groups(study)[0])
    assert trained == [("sweep", 0.05), ("sweep", 0.1), ("sweep", 0.2), ("sweep", 0.4), ("sweep", 0.8), ("seeds", 0.4)]
    assert run.chosen == {groups(study)[0].key: 0.4}
    assert run.total == 6 + 2  # the progress count grows by the widened candidates


def test_variants_are_the_product_of_axes():
    vs = variants_of({"run.epochs": [2, 4], "w": [{"label": "short", "set": {"schedule.warmup_epochs": 0.1}}]}, "x")
    assert [v.label for v in vs] == ["run.epochs=2, short", "run.epochs=4, short"]
    assert vs[1].overrides == ("run.epochs=4", "schedule.warmup_epochs=0.1")


def test_spec_errors_name_the_key():
    with pytest.raises(ValueError, match="unknown key 'sedes'"):
        _study(sedes=[0])
    with pytest.raises(ValueError, match="from_arm='nope'"):
        _study(arms={"a": {"lr": {"rule": "linear", "from_arm": "nope", "base_batch": 8}}})
    with pytest.raises(ValueError, match="needs base_batch"):
        _study(arms={"a": {"lr": {"rule": "sqrt", "base_lr": 0.1}}})
    with pytest.raises(ValueError, match="no study 'nope'"):
        load_study("nope")
    with pytest.raises(ValueError, match="sweep_seed 1 is one of the seeds"):
        _study(sweep_seed=1)
    with pytest.raises(ValueError, match="validation_fraction"):
        _study(validation_fraction=0)
    with pytest.raises(ValueError, match="claims.0.: arm 'nope'"):
        _study(claims=[{"arm": "nope", "reference": "sgd", "above": 0}])
    with pytest.raises(ValueError, match="unknown key 'widden'"):
        _study(arms={"a": {"lr": {"base_lr": 0.1, "factors": [1, 2], "widden": 1}}})
    with pytest.raises(ValueError, match="widen=1"):
        _study(arms={"a": {"lr": {"base_lr": 0.1, "widen": 1}}})
    with pytest.raises(ValueError, match="above and/or below"):
        _study(claims=[{"arm": "big", "reference": "sgd"}])
    with pytest.raises(ValueError, match="mark exactly one claim primary"):
        _study(claims=[{"arm": "sgd", "reference": "sgd", "above": 0}])
    with pytest.raises(ValueError, match="ties='coin' must be one of best, loss, keep"):
        _study(ties="coin")
    with pytest.raises(ValueError, match="effect 1 needs effect_from"):
        _study(claims=[{"arm": "sgd", "reference": "sgd", "above": 0, "primary": True, "effect": 1}])
    with pytest.raises(ValueError, match="sweep_seed 0 is one of the seeds"):
        _study(arms={"a": {"lr": 0.1, "seeds": [0]}})


def test_shipped_studies_load():
    assert count_points(load_study("sgd-vs-adam")) == 2 * 5 * (3 + 3)
    study = load_study("lars-large-batch")
    assert [a.batches for a in study.arms] == [(32,), (256,), (256,), (256,), (256,)]
    assert len(study.variants) == 1 and count_points(study) == 5 * 3 + 4 * 8 + 3  # 8 seeds a decisive arm
    assert [len(study.seeds_of(a)) for a in study.arms] == [8, 8, 3, 8, 8] and study.ties_of(study.arm("sgd")) == "keep"
    assert [c.primary for c in study.claims] == [True, False, False, False] and all(c.margin_from for c in study.claims)
    assert [a.lr.factors for a in study.arms] == [(0.5, 1.0, 2.0)] * 5  # grids a factor of 2 apart
    assert study.validation_fraction == 0.2 and study.sweep_seed not in study.all_seeds and len(study.claims) == 4
    assert {a.name: dict(o.split("=", 1) for o in a.overrides).get("optim.lars_eta") for a in study.arms
            if a.name.startswith("lars")} == {"lars": "0.001", "lars-eta0.01": "0.01"}
    assert load_study("lars-large-batch", quick=True).seeds == (1,)


def test_pca_plane_recovers_a_planar_path():
    import numpy as np

    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(2, 50))
    t = np.linspace(0, 1, 12)[:, None]
    path = 3 * t * u + np.sin(3 * t) * v + 5.0
    plane = pca_plane([path[:6], path[6:]])
    xy = plane.project(path)
    back = plane.origin + xy @ plane.directions
    assert np.allclose(back, path, atol=1e-8)  # a path in a plane is recovered exactly
    assert math.isclose(sum(plane.explained), 1.0, rel_tol=1e-9)
    xs, ys = grid_axes([xy], 5, 0.25)
    assert xs[0] < xy[:, 0].min() and xs[-1] > xy[:, 0].max() and len(ys) == 5
    assert snapshot_every(100, 24) == 4 and snapshot_every(5, 24) == 1


def test_a_summary_counts_the_failures_at_the_chosen_rate_only():
    from launch.study.report import summarise

    study = _study(batches=[8], seeds=[1, 2])
    def row(lr, seed, phase, status="ok", acc=0.8):
        return {"id": f"base/sgd/b8/lr{lr:.4g}/s{seed}", "lr": lr, "seed": seed, "phase": phase, "status": status,
                "final_val_accuracy": acc, "final_val_loss": 1 - acc}
    rows = [row(0.0125, 0, "sweep", acc=0.7), row(0.05, 0, "sweep", acc=0.85), row(0.2, 0, "sweep", "failed"),
            row(0.05, 1, "seeds", acc=0.83), row(0.05, 2, "seeds", acc=0.81)]
    s = next(x for x in summarise(study, rows) if x.group.arm.name == "sgd")
    assert s.lr == 0.05 and s.failed == 0  # the diverged candidate is the sweep's
    assert [r["seed"] for r in s.rows] == [1, 2] and s.mean("final_val_accuracy") == pytest.approx(0.82)  # not the sweep's 0.85
    s = next(x for x in summarise(study, rows[:4] + [row(0.05, 2, "seeds", "failed")]) if x.group.arm.name == "sgd")
    assert len(s.rows) == 1 and s.failed == 1
