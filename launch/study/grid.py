"""A study's grid: the spec read from ``launch/study/studies.yml`` and the training points it expands to.

A study trains one base configuration (a name in ``launch/train/configs.yml``) over

* **variants**: the product of the study's ``axes`` (any config keys: epochs, warmup, ...),
* **arms**: the optimizers compared (one panel each), each with its own overrides, global batch
  sizes and learning-rate rule,
* **seeds**.

A *group* is one (variant, arm, batch); its learning rate is fixed, scaled from a base batch by a
rule (``linear``, ``sqrt``), taken from another arm's chosen rate by such a rule (``from_arm``), or
chosen by a sweep: every candidate trains with the study's ``sweep_seed``, the best final accuracy on the
validation split (carved from the training images: ``validation_fraction``, ``split_seed``) wins, and the
winner trains again on the fresh ``seeds``, which alone make the reported results (their test split
included). Everything here is pure (no training, no files).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from launch.study.claims import Claim, claim_from_dict
from launch.study.sweep import TIE_RULES, choose_lr, widened_candidate

STUDIES_FILE = Path(__file__).with_name("studies.yml")
LR_MODES = ("fixed", "linear", "sqrt", "sweep")


@dataclass(frozen=True)
class LrRule:
    """How a group gets its learning rate. ``rule`` scales ``base_lr`` from ``base_batch`` (``fixed``,
    ``linear``, ``sqrt``); ``factors`` (a sweep) multiply that centre into candidates; ``from_arm``
    takes ``base_lr`` and ``base_batch`` from another arm's chosen rate in the same variant; ``widen``: where
    the sweep's best sits at an end of its candidates, up to that many more candidates beyond it, each one
    grid step (the ratio of the two candidates at that end) further, until the best is inside."""

    rule: str = "fixed"
    base_lr: float = 0.1
    base_batch: int = 0
    factors: tuple[float, ...] = ()
    from_arm: str = ""
    widen: int = 0

    @property
    def mode(self) -> str:
        return "sweep" if self.factors else self.rule


@dataclass(frozen=True)
class Arm:
    name: str
    label: str
    overrides: tuple[str, ...]
    lr: LrRule
    batches: tuple[int, ...]
    seeds: tuple[int, ...] | None = None  # this arm's fresh seeds; None: the study's
    ties: str = ""  # how a tie of its sweep is settled (launch.study.sweep); empty: the study's


@dataclass(frozen=True)
class Variant:
    label: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class TrajectorySpec:
    """Record the weights of ``arm`` (first variant, ``seed``) every few updates, at its chosen rates."""

    arm: str
    seed: int = 0
    snapshots: int = 24
    grid: int = 15
    margin: float = 0.25


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    about: str
    base: str
    data: str
    overrides: tuple[str, ...]
    arms: tuple[Arm, ...]
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    replicas: int
    max_micro_batch: int
    target_accuracy: float
    pod: str
    reference_arm: str = ""
    claims: tuple[Claim, ...] = ()
    trajectory: TrajectorySpec | None = None
    reduced: str = ""
    quick: bool = False
    sweep_seed: int = 0  # the seed every sweep candidate trains with; never one of ``seeds``
    validation_fraction: float = 0.0  # of each class of the training images, held out for the choices
    split_seed: int = 0
    update_stats_every: int = 0  # run.update_stats_every of every point (models.optim.probe); 0: off
    ties: str = "best"  # how a sweep's tie is settled (launch.study.sweep.TIE_RULES)
    spread: float = math.nan  # planning standard deviation of one arm's test accuracy over seeds, points
    spread_from: str = ""  # where that spread comes from
    source: str = ""  # the study file it was read from (the claims' declaration is checked in its git history)

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ValueError(f"study {self.name!r} has no arm {name!r}; arms are {', '.join(a.name for a in self.arms)}")

    def seeds_of(self, arm: Arm) -> tuple[int, ...]:
        """The fresh seeds ``arm`` trains its chosen configurations with."""
        return self.seeds if arm.seeds is None else arm.seeds

    def ties_of(self, arm: Arm) -> str:
        return arm.ties or self.ties

    @property
    def all_seeds(self) -> tuple[int, ...]:
        return tuple(sorted({s for a in self.arms for s in self.seeds_of(a)}))


@dataclass(frozen=True)
class Group:
    variant: Variant
    arm: Arm
    batch: int

    @property
    def key(self) -> str:
        return f"{slug(self.variant.label)}/{self.arm.name}/b{self.batch}"


@dataclass(frozen=True)
class Point:
    """One training run of the grid."""

    group: Group
    lr: float
    seed: int
    phase: str  # sweep (a candidate, the sweep seed) or seeds (the chosen or given rate, a fresh seed)
    micro_batch: int
    grad_accum: int
    replicas: int

    @property
    def id(self) -> str:
        return f"{self.group.key}/lr{self.lr:.4g}/s{self.seed}"


# -- reading the spec -------------------------------------------------------------------------
def load_study(name: str, quick: bool = False, path: Path = STUDIES_FILE) -> Study:
    """The study ``name`` of ``path``; ``quick`` applies its ``quick:`` section (a tiny grid)."""
    if not Path(path).is_file():
        raise ValueError(f"study file {path} does not exist; pass --studies FILE.yml or use launch/study/studies.yml")
    entries = yaml.safe_load(Path(path).read_text()) or {}
    names = sorted(k for k in entries if not str(k).startswith("_"))
    if name not in names:
        raise ValueError(f"no study {name!r} in {path}; choose one of {', '.join(names)}")
    raw = dict(entries[name])
    if quick:
        raw = _merge(raw, raw.get("quick") or {})
    raw.pop("quick", None)
    return replace(study_from_dict(name, raw, quick, where=f"{path}:{name}"), source=str(Path(path).resolve()))


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


_KEYS = {"title", "about", "base", "data", "set", "arms", "axes", "seeds", "replicas", "max_micro_batch",
         "target_accuracy", "pod", "reference_arm", "claims", "trajectory", "reduced", "batches", "sweep_seed",
         "validation_fraction", "split_seed", "update_stats_every", "ties", "spread"}


def study_from_dict(name: str, raw: dict, quick: bool = False, where: str = "study") -> Study:
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; valid keys are {', '.join(sorted(_KEYS))}")
    for key in ("base", "arms", "seeds", "target_accuracy", "validation_fraction"):
        if key not in raw:
            raise ValueError(f"{where}: {key!r} is required")
    batches = tuple(int(b) for b in raw.get("batches", ()))
    arms = tuple(_arm(k, v or {}, batches, f"{where}.arms.{k}") for k, v in raw["arms"].items())
    claims = tuple(claim_from_dict(c or {}, f"{where}.claims[{i}]") for i, c in enumerate(raw.get("claims") or []))
    traj = raw.get("trajectory")
    spread = raw.get("spread") or {}
    if not isinstance(spread, dict) or set(spread) - {"points", "from"}:
        raise ValueError(f"{where}.spread={spread!r}: give {{points: SD, from: WHERE IT COMES FROM}} (the planning "
                         "standard deviation of one arm's test accuracy over seeds)")
    study = Study(
        name=name, title=str(raw.get("title", name)), about=str(raw.get("about", "")).strip(), base=str(raw["base"]),
        data=str(raw.get("data", "")), overrides=overrides_of(raw.get("set") or {}), arms=arms,
        variants=variants_of(raw.get("axes") or {}, f"{where}.axes"), seeds=tuple(int(s) for s in raw["seeds"]),
        replicas=int(raw.get("replicas", 1)), max_micro_batch=int(raw.get("max_micro_batch", 64)),
        target_accuracy=float(raw["target_accuracy"]), pod=str(raw.get("pod", "POD16")),
        reference_arm=str(raw.get("reference_arm", "")), claims=claims,
        trajectory=TrajectorySpec(**traj) if traj else None, reduced=str(raw.get("reduced", "")).strip(), quick=quick,
        sweep_seed=int(raw.get("sweep_seed", 0)), validation_fraction=float(raw["validation_fraction"]),
        split_seed=int(raw.get("split_seed", 0)), update_stats_every=int(raw.get("update_stats_every", 0)),
        ties=str(raw.get("ties", "best")), spread=float(spread.get("points", math.nan)),
        spread_from=str(spread.get("from", "")).strip())
    _check(study, where)
    return study


def _check(study: Study, where: str) -> None:
    if not study.seeds:
        raise ValueError(f"{where}.seeds: give at least one seed")
    if study.sweep_seed in study.all_seeds:
        raise ValueError(f"{where}: sweep_seed {study.sweep_seed} is one of the seeds {list(study.all_seeds)}: the "
                         "reported runs must be fresh seeds that took no part in choosing the rate")
    for ties in {study.ties, *(a.ties for a in study.arms if a.ties)}:
        if ties not in TIE_RULES:
            raise ValueError(f"{where}: ties={ties!r} must be one of {', '.join(TIE_RULES)}")
    if not 0.0 < study.validation_fraction < 1.0:
        raise ValueError(f"{where}.validation_fraction={study.validation_fraction!r} must be in (0, 1): every choice is "
                         "made on a validation split carved from the training images, the test split is reported")
    if study.replicas < 1 or study.max_micro_batch < 1:
        raise ValueError(f"{where}: replicas and max_micro_batch must be >= 1")
    names = [a.name for a in study.arms]
    for arm in study.arms:
        if arm.lr.from_arm and arm.lr.from_arm not in names[: names.index(arm.name)]:
            raise ValueError(f"{where}.arms.{arm.name}.lr.from_arm={arm.lr.from_arm!r} must name an arm listed "
                             f"before it (one of {', '.join(names[: names.index(arm.name)]) or 'none'})")
    for ref in (study.reference_arm, study.trajectory.arm if study.trajectory else ""):
        if ref and ref not in names:
            raise ValueError(f"{where}: arm {ref!r} is not one of {', '.join(names)}")
    for i, claim in enumerate(study.claims):
        for arm, batch in ((claim.arm, claim.batch), (claim.reference, claim.reference_batch)):
            if arm not in names:
                raise ValueError(f"{where}.claims[{i}]: arm {arm!r} is not one of {', '.join(names)}")
            if batch and batch not in study.arm(arm).batches:
                raise ValueError(f"{where}.claims[{i}]: arm {arm!r} has batches {list(study.arm(arm).batches)}, not {batch}")
    if study.claims and sum(c.primary for c in study.claims) != 1:
        raise ValueError(f"{where}.claims: mark exactly one claim primary: true (found "
                         f"{sum(c.primary for c in study.claims)}); the others are Holm-corrected as one family")


def _arm(name: str, raw: dict, batches: tuple[int, ...], where: str) -> Arm:
    lr = raw.get("lr", 0.1)
    lr_raw = {"base_lr": lr} if isinstance(lr, (int, float)) else dict(lr)
    if "factors" in lr_raw:
        lr_raw["factors"] = tuple(float(f) for f in lr_raw["factors"])
    unknown = sorted(set(lr_raw) - {"rule", "base_lr", "base_batch", "factors", "from_arm", "widen"})
    if unknown:
        raise ValueError(f"{where}.lr: unknown key {unknown[0]!r}; lr has rule, base_lr, base_batch, factors, "
                         "from_arm, widen")
    rule = LrRule(**lr_raw)
    if rule.widen < 0 or (rule.widen and len(rule.factors) < 2):
        raise ValueError(f"{where}.lr.widen={rule.widen!r}: a number >= 0, for a sweep of at least two factors")
    if rule.rule not in LR_MODES[:3]:
        raise ValueError(f"{where}.lr.rule={rule.rule!r} must be one of fixed, linear, sqrt")
    if rule.rule != "fixed" and not rule.base_batch and not rule.from_arm:
        raise ValueError(f"{where}.lr: rule {rule.rule} needs base_batch (the batch base_lr was tuned at)")
    arm_batches = tuple(int(b) for b in raw.get("batches", batches))
    if not arm_batches:
        raise ValueError(f"{where}: give batches (here or for the whole study)")
    unknown = sorted(set(raw) - {"label", "set", "lr", "batches", "seeds", "ties"})
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; an arm has label, set, lr, batches, seeds, ties")
    return Arm(name, str(raw.get("label", name)), overrides_of(raw.get("set") or {}), rule, arm_batches,
               None if raw.get("seeds") is None else tuple(int(s) for s in raw["seeds"]), str(raw.get("ties", "")))


def overrides_of(values: dict[str, Any]) -> tuple[str, ...]:
    """``{"optim.name": "adam", "model.options": {...}}`` -> ``launch.train.config_file`` override strings."""
    return tuple(f"{key}={json.dumps(value)}" for key, value in values.items())


def variants_of(axes: dict[str, list], where: str) -> tuple[Variant, ...]:
    """The product of the axes. A value is a scalar for the config key named by the axis, or
    ``{label: ..., set: {key: value, ...}}``."""
    lists = []
    for axis, values in axes.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.{axis}: give a non-empty list of values")
        lists.append([_variant(axis, v) for v in values])
    out = []
    for combo in itertools.product(*lists):
        out.append(Variant(", ".join(v.label for v in combo) or "base", sum((v.overrides for v in combo), ())))
    return tuple(out) or (Variant("base", ()),)


def _variant(axis: str, value: Any) -> Variant:
    if isinstance(value, dict):
        return Variant(str(value.get("label", axis)), overrides_of(value.get("set") or {}))
    return Variant(f"{axis}={value}", overrides_of({axis: value}))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-") or "base"


# -- batch arithmetic -------------------------------------------------------------------------
def split_batch(batch: int, replicas: int, max_micro_batch: int) -> tuple[int, int]:
    """(micro-batch, accumulation) so that micro x accumulation x replicas = ``batch``, with the
    largest micro-batch up to ``max_micro_batch``."""
    if batch < 1 or replicas < 1 or batch % replicas:
        raise ValueError(f"global batch {batch} cannot be split over {replicas} replicas: choose a batch that is a "
                         f"multiple of the replicas (study key replicas, or the launcher's --num-replicas)")
    per_replica = batch // replicas
    micro = max(d for d in range(1, min(per_replica, max_micro_batch) + 1) if per_replica % d == 0)
    return micro, per_replica // micro


def pod_split(batch: int, pod_ipus: int, ipus_per_replica: int, max_micro_batch: int) -> tuple[int, int, int]:
    """(replicas, micro-batch, accumulation) of ``batch`` on a POD: as many replicas as the POD holds
    and the batch feeds with at least one image each (a power of two), then :func:`split_batch`."""
    replicas = 1
    while replicas * 2 * ipus_per_replica <= pod_ipus and batch % (replicas * 2) == 0:
        replicas *= 2
    micro, accum = split_batch(batch, replicas, max_micro_batch)
    return replicas, micro, accum


def scaled_lr(rule: str, base_lr: float, base_batch: int, batch: int) -> float:
    """``base_lr`` moved from ``base_batch`` to ``batch``: fixed, linear or square-root scaling."""
    if rule == "fixed" or not base_batch:
        return base_lr
    ratio = batch / base_batch
    return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))


# -- expansion ----------------------------------------------------------------------------------
def groups(study: Study) -> list[Group]:
    """Every (variant, arm, batch), in the order they run: an arm never before the one it scales from."""
    return [Group(v, a, b) for v in study.variants for a in study.arms for b in a.batches]


def with_replicas(study: Study, replicas: int) -> Study:
    """The study on the launcher's replicas (under ``poprun_py`` its ``--num-replicas`` decides)."""
    return replace(study, replicas=replicas)


def sweep_candidates(study: Study, group: Group, base_lr: float | None = None,
                     base_batch: int | None = None) -> list[float]:
    """The rates a group trains: one (fixed or scaled) or a sweep's candidates."""
    rule = group.arm.lr
    centre = scaled_lr(rule.rule, rule.base_lr if base_lr is None else base_lr,
                       rule.base_batch if base_batch is None else base_batch, group.batch)
    return [float(f"{centre * f:.6g}") for f in rule.factors] if rule.factors else [float(f"{centre:.6g}")]


def scaling_source(study: Study, group: Group, chosen: dict[str, float | None]) -> tuple[float | None, int | None, str]:
    """(base_lr, base_batch, source group key) a ``from_arm`` group scales from, given the rates chosen
    so far; (None, None, "") for any other group. base_lr is None while the source has no rate."""
    rule = group.arm.lr
    if not rule.from_arm:
        return None, None, ""
    source = study.arm(rule.from_arm)
    base_batch = rule.base_batch or source.batches[0]
    key = Group(group.variant, source, base_batch).key
    return chosen.get(key), base_batch, key


def make_point(study: Study, group: Group, lr: float, seed: int, phase: str) -> Point:
    micro, accum = split_batch(group.batch, study.replicas, study.max_micro_batch)
    return Point(group, lr, seed, phase, micro, accum, study.replicas)


def points_in_group(study: Study, group: Group) -> int:
    """How many runs the group makes (a sweep: every candidate once with the sweep seed, then the fresh seeds)."""
    return len(group.arm.lr.factors) + len(study.seeds_of(group.arm))


def count_points(study: Study) -> int:
    return sum(points_in_group(study, g) for g in groups(study))


def point_overrides(study: Study, point: Point, data_path: str, run_dir: str) -> list[str]:
    """The ``launch.train.config_file`` overrides of one point, in the order they apply (later wins)."""
    g = point.group
    return [*study.overrides, *g.variant.overrides, *g.arm.overrides,
            f"data.path={json.dumps(data_path)}", f"data.micro_batch={point.micro_batch}",
            f"data.grad_accum={point.grad_accum}", f"data.replicas={point.replicas}",
            f"schedule.base_lr={point.lr!r}", "schedule.lr_exponent=null", f"run.seed={point.seed}",
            f"run.run_dir={json.dumps(run_dir)}", "run.plots=false", "run.progress_bar=false", "run.evaluate=true",
            f"data.validation_fraction={study.validation_fraction!r}", f"data.split_seed={study.split_seed}",
            f"run.evaluate_test={json.dumps(point.phase == 'seeds')}", f"run.update_stats_every={study.update_stats_every}"]


__all__ = ["Arm", "Group", "LrRule", "Point", "Study", "TrajectorySpec", "Variant", "choose_lr", "count_points",
           "groups", "load_study", "make_point", "point_overrides", "points_in_group", "pod_split", "scaled_lr",
           "scaling_source",
           "split_batch", "sweep_candidates", "widened_candidate", "with_replicas"]
