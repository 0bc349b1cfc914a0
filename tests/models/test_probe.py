"""The LARS instruments: per-group trust ratio, effective step and drift, exactly as the update made them."""

from __future__ import annotations

import numpy as np
import pytest

from models.optim import OptimConfig, lars_trust_ratio, make_optimizer
from models.optim.probe import EXEMPT, UpdateProbe, group_of
from models.param import Param


def _params():
    w = Param("features.1.0.weight", np.array([3.0, 4.0]))
    v = Param("features.1.1.weight", np.array([0.0, 2.0]))
    b = Param("features.1.0.bias", np.array([1.0, -2.0]), kind="bias")
    w.grad[:], v.grad[:], b.grad[:] = [0.6, 0.8], [1.0, 0.0], [0.5, 0.5]
    return [w, v, b]


def test_groups_trust_ratio_step_and_drift_of_one_lars_update():
    params = _params()
    opt = make_optimizer(OptimConfig(name="lars", momentum=0.9, lars_eta=0.001, weight_decay=0.0), params)
    probe = UpdateProbe(params, 3, lars_eta=0.001)
    assert [group_of(p) for p in params] == ["features.1", "features.1", EXEMPT]
    assert [probe.due(s) for s in range(4)] == [True, False, False, True]
    before = [p.data.copy() for p in params]
    probe.before()
    opt.step(2.0)
    rec = probe.after(0, 2.0)
    ratios = [lars_trust_ratio(5.0, 1.0, 0.001, 0.0, 0.0), lars_trust_ratio(2.0, 1.0, 0.001, 0.0, 0.0)]
    g = rec["groups"]["features.1"]
    assert g["trust_ratio"] == pytest.approx(np.median(ratios)) and g["trust_ratio_min"] == pytest.approx(0.002)
    dw = np.concatenate([params[0].data - before[0], params[1].data - before[1]])
    assert g["step"] == pytest.approx(np.linalg.norm(dw) / np.linalg.norm(np.concatenate(before[:2])))
    assert g["step"] == pytest.approx(2.0 * np.hypot(0.005 * 1.0, 0.002 * 1.0) / np.sqrt(29.0))  # lr x trust x g
    assert g["drift"] == pytest.approx(g["step"])  # the first update: w_0 is the weights before it
    assert "trust_ratio" not in rec["groups"][EXEMPT]  # norms and biases have none
    assert rec["groups"][EXEMPT]["step"] == pytest.approx(2.0 * np.linalg.norm([0.5, 0.5]) / np.sqrt(5.0))
    assert probe.drain() == [rec] and probe.drain() == []


def test_drift_accumulates_over_updates_and_sgd_has_no_trust_ratio():
    params = _params()
    opt = make_optimizer(OptimConfig(name="sgd", momentum=0.0), params)
    probe = UpdateProbe(params, 1)
    w0 = [p.data.copy() for p in params]
    for step in range(3):
        probe.before()
        opt.step(0.1)
        rec = probe.after(step, 0.1)
    assert all("trust_ratio" not in g for g in rec["groups"].values())
    total = np.concatenate([params[0].data - w0[0], params[1].data - w0[1]])
    assert probe.drift(3)["groups"]["features.1"] == pytest.approx(np.linalg.norm(total) / np.sqrt(29.0))
    # plain SGD on fixed gradients: three steps of 0.1 g, |g| = sqrt(2) over the group, |w_0| = sqrt(29)
    assert rec["groups"]["features.1"]["drift"] == pytest.approx(0.3 * np.sqrt(2.0) / np.sqrt(29.0))


def test_probe_refuses_zero_every():
    with pytest.raises(ValueError, match="update_stats_every"):
        UpdateProbe(_params(), 0)
