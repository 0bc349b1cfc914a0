"""A per-layer profile of a prediction, as PopVision's execution view would show it.

For every IPU (pipeline stage) and layer: the cycles of one micro-batch's forward, recomputed
forward and backward (input + weight gradient), split into matrix-unit vertices, vector
vertices, exchange and sync, with the chosen plan of each planned operation; then the
per-update work of each IPU (gradient accumulation over all micro-batches, the optimizer by
part) and of the replica (all-reduce, host IO, the host call). ``profile_dict`` is the stable
JSON form (``schema`` is bumped on any incompatible change); ``format_profile`` the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from ipu.cost.layer_names import column_width, short_names
from ipu.cost.bsp import CATEGORIES, Cycles
from ipu.cost.prediction import Prediction

SCHEMA = 1


@dataclass(frozen=True)
class ProfileRow:
    """One layer on one IPU: cycles per micro-batch by pass and category."""

    ipu: int
    layer: str
    kind: str
    block: str
    passes: dict[str, Cycles]  # "fwd", "recomp" (stages that recompute), "bwd"
    plan: str

    @property
    def total(self) -> Cycles:
        return sum(self.passes.values(), Cycles())


def profile_rows(prediction: Prediction) -> list[ProfileRow]:
    rows = []
    for stage in prediction.stages:
        for cost in stage.layers:
            passes = {"fwd": cost.fwd}
            if stage.recompute:
                passes["recomp"] = cost.fwd
            passes["bwd"] = cost.bwd
            rows.append(ProfileRow(stage.ipu, cost.layer.name, cost.layer.kind, cost.layer.block, passes,
                                   cost.plan_text()))
    return rows


def _cycles_dict(c: Cycles, clock_hz: float) -> dict[str, float]:
    out = {k: round(v, 1) for k, v in c.as_dict().items()}
    out["total"] = round(c.total, 1)
    out["seconds"] = c.total / clock_hz
    out["compute_sets"] = c.compute_sets
    return out


def profile_dict(name: str, prediction: Prediction) -> dict:
    """The profile as plain data (JSON-ready): per IPU, per layer and pass, and per update."""
    plan = prediction.plan
    clock = plan.pod.chip.clock_hz
    ipus = []
    for stage in prediction.stages:
        layers = [{"layer": r.layer, "kind": r.kind, "block": r.block, "plan": r.plan,
                   "passes": {k: _cycles_dict(v, clock) for k, v in r.passes.items()}}
                  for r in profile_rows(prediction) if r.ipu == stage.ipu]
        n = plan.gradient_accumulation
        ipus.append({
            "ipu": stage.ipu,
            "blocks": [stage.layers[0].layer.block, stage.layers[-1].layer.block],
            "per_micro_batch": _cycles_dict(stage.per_micro_batch, clock),
            "per_update": {"accumulate": _cycles_dict(stage.accumulate * n, clock),
                           **{k: _cycles_dict(v, clock) for k, v in stage.optimizer.items()}},
            "layers": layers,
        })
    return {"schema": SCHEMA, "preset": name, "chip": plan.chip, "system": plan.system,
            "clock_hz": clock, "micro_batch": plan.micro_batch, "gradient_accumulation": plan.gradient_accumulation,
            "ipus": ipus, "per_update_replica_s": {k: prediction.breakdown[k] for k in
                                                   ("all_reduce", "host_io", "host_call", "pipeline_bubble")}}


def format_profile(name: str, prediction: Prediction, top: int | None = None) -> str:
    """The profile as a table; ``top``: only the most expensive layers of each IPU."""
    plan = prediction.plan
    clock = plan.pod.chip.clock_hz
    lines = [f"=== profile {name} on {plan.system} ({plan.pod.chip.name}): cycles per micro-batch of "
             f"{plan.micro_batch}, fwd + recomp + bwd"]
    rows = profile_rows(prediction)
    names = short_names([r.layer for r in rows])  # the shortest suffix telling the rows apart (ipu.cost.layer_names)
    width = column_width(list(names.values()), 34)
    head = f"{'layer':{width}} {'kind':7} " + " ".join(f"{c:>9}" for c in CATEGORIES) + f" {'total us':>9} {'sets':>5}  plan"
    for stage in prediction.stages:
        mine = [r for r in rows if r.ipu == stage.ipu]
        shown = sorted(mine, key=lambda r: -r.total.total)[:top] if top else mine
        lines += [f"-- IPU {stage.ipu}: {len(mine)} layers" + (f", the {len(shown)} most expensive" if top else ""),
                  head]
        for r in shown:
            t = r.total
            lines.append(f"{names[r.layer]:{width}} {r.kind:7} " + " ".join(f"{getattr(t, c):9.0f}" for c in CATEGORIES)
                         + f" {t.total / clock * 1e6:9.1f} {t.compute_sets:5d}  {r.plan}")
        total = stage.per_micro_batch
        lines.append(f"{'IPU total (one micro-batch)':{width + 8}} " + " ".join(f"{getattr(total, c):9.0f}" for c in CATEGORIES)
                     + f" {total.total / clock * 1e6:9.1f} {total.compute_sets:5d}")
        per_update = {"accumulate x GA": stage.accumulate * plan.gradient_accumulation, **stage.optimizer}
        lines.append("per update: " + ", ".join(f"{k} {v.total / clock * 1e3:.3f} ms ({v.compute_sets} sets)"
                                                for k, v in per_update.items()))
    b = prediction.breakdown
    lines.append(f"replica per update: all-reduce {b['all_reduce'] * 1e3:.2f} ms, host IO not hidden "
                 f"{b['host_io'] * 1e3:.2f} ms, host call {b['host_call'] * 1e3:.3f} ms, pipeline bubble "
                 f"{b['pipeline_bubble'] * 1e3:.2f} ms")
    return "\n".join(lines)
