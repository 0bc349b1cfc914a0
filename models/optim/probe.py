"""What each weight update does to the weights, per parameter group: the LARS instruments.

Every ``every`` updates, around one optimizer step, :class:`UpdateProbe` records for each group

* ``trust_ratio``: the LARS trust ratio of the group's LARS tensors (median, min, max over them; TF's
  formula on the gradient the optimizer steps with, ``momentum.lars_trust_ratio``), absent for groups
  and optimizers without one,
* ``step``: the effective step ``|w_after - w_before| / |w_before|`` (norms over the whole group),
* ``drift``: ``|w - w_0| / |w_0|`` after the update, ``w_0`` the weights when the probe was made (the
  run's initial weights: a resumed run builds the same initial weights from its seed first).

Groups: a decaying parameter (a weight) belongs to the first two components of its name
(``features.3.0.block.1.0.weight`` -> ``features.3``); every exempt parameter (norm scales and offsets,
biases: no weight decay, no trust ratio) to ``exempt``. Between recorded updates the probe costs nothing;
a recorded one copies the weights once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.optim.momentum import lars_trust_ratio
from models.param import Param

EXEMPT = "exempt"


def group_of(param: Param) -> str:
    """The group a parameter is reported in (see the module docstring)."""
    return ".".join(param.name.split(".")[:2]) if param.decays else EXEMPT


class UpdateProbe:
    """Records per-group update statistics every ``every`` updates into :attr:`records` (drained by the caller)."""

    def __init__(self, params: Sequence[Param], every: int, *, lars_eta: float = 0.0, weight_decay: float = 0.0,
                 eps: float = 0.0) -> None:
        if every < 1:
            raise ValueError(f"update statistics every {every} updates: give a positive number (run.update_stats_every)")
        self.params, self.every = list(params), int(every)
        self.lars_eta, self.weight_decay, self.eps = float(lars_eta), float(weight_decay), float(eps)
        self.groups: dict[str, list[int]] = {}
        for i, p in enumerate(self.params):
            self.groups.setdefault(group_of(p), []).append(i)
        self.initial = [p.data.astype(np.float64) for p in self.params]
        self._before: list[np.ndarray] | None = None
        self._trust: dict[str, list[float]] = {}
        self.records: list[dict] = []

    def due(self, step: int) -> bool:
        """Whether update ``step`` (0-based) is recorded: every ``every``-th, the first included."""
        return step % self.every == 0

    def before(self) -> None:
        """Called with the final gradients in ``param.grad``, just before the optimizer steps."""
        self._before = [p.data.astype(np.float64) for p in self.params]
        self._trust = {}
        if self.lars_eta > 0.0:
            for name, members in self.groups.items():
                ratios = [self._trust_ratio(self.params[i], self._before[i]) for i in members if self.params[i].decays]
                if ratios:
                    self._trust[name] = ratios

    def _trust_ratio(self, p: Param, w: np.ndarray) -> float:
        g = p.grad.astype(np.float64)
        return lars_trust_ratio(float(np.linalg.norm(w)), float(np.linalg.norm(g)), self.lars_eta,
                                self.weight_decay, self.eps)

    def after(self, step: int, lr: float) -> dict:
        """Called just after the optimizer stepped: the record of update ``step``, also kept in :attr:`records`."""
        if self._before is None:
            raise RuntimeError("UpdateProbe.after without before: call before() ahead of the optimizer step")
        groups = {}
        for name, members in self.groups.items():
            stats = {"step": _ratio([self.params[i].data - self._before[i] for i in members],
                                    [self._before[i] for i in members]),
                     "drift": self._drift(members)}
            if name in self._trust:
                ratios = self._trust[name]
                stats.update(trust_ratio=float(np.median(ratios)), trust_ratio_min=float(min(ratios)),
                             trust_ratio_max=float(max(ratios)))
            groups[name] = stats
        self._before = None
        record = {"event": "update_stats", "step": int(step), "lr": float(lr), "groups": groups}
        self.records.append(record)
        return record

    def _drift(self, members: list[int]) -> float:
        return _ratio([self.params[i].data - self.initial[i] for i in members], [self.initial[i] for i in members])

    def drift(self, step: int) -> dict:
        """``|w - w_0| / |w_0|`` of every group now: the run's total movement (``event: weight_drift``)."""
        return {"event": "weight_drift", "step": int(step),
                "groups": {name: self._drift(members) for name, members in self.groups.items()}}

    def drain(self) -> list[dict]:
        out, self.records = self.records, []
        return out


def _ratio(numerators: list[np.ndarray], denominators: list[np.ndarray]) -> float:
    """``|concat(numerators)| / |concat(denominators)|`` (nan when the denominator is 0)."""
    num = float(np.sqrt(sum(float(np.vdot(x, x)) for x in numerators)))
    den = float(np.sqrt(sum(float(np.vdot(x, x)) for x in denominators)))
    return num / den if den > 0.0 else float("nan")


__all__ = ["EXEMPT", "UpdateProbe", "group_of"]
