"""What-if sweeps of the IPU plan: option values, their combinations and each combination's ``IpuPlan``.

Pure functions (no model, no I/O): ``launch.predict`` parses the command line with them, and
``launch.predict.sweep_report`` runs the memory fit and the cost model on each plan.

* Every plan option (:data:`PLAN_OPTIONS`) takes one value or a comma list (``--micro-batch 2,3,4``);
  :func:`combinations` gives one choice per element of their product, in the order the options are given.
* :func:`batch_split`: replicas fill the system (its IPUs / IPUs per replica) when a row names the system
  or the IPUs per replica, else they are the configuration's; gradient accumulation is
  global batch / (micro-batch x replicas), which must be a whole number: the global batch is the
  configuration's unless ``--global-batch`` sets it. With ``--gradient-accumulation`` the accumulation is
  held instead and the global batch follows (micro-batch x replicas x accumulation): a micro-batch
  sweep then asks "the largest micro-batch that fits" directly. :func:`batch_rule` says which holds.
* :func:`plan_for`: the configuration's pipeline splits are kept for its own IPUs per replica; any other
  count of IPUs gets an automatic split (``ipu.pipeline.split.split_balanced`` by FLOPs, through
  ``IpuPlan.pipeline_splits=()``). A row on another system than the configuration's gets that system's
  most hosts (as the presets do); its own system keeps the configuration's hosts. ``--pipeline-splits``
  names the split of the rows whose IPUs per replica it fits (splits + 1); the other rows are automatic.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ipu.plan import OPTIMIZER_STATE_SLOTS, IpuPlan, optimizer_state
from ipu.precision import PRECISIONS
from ipu.specs import CHIPS
from poprun_py.systems import SYSTEMS, get_system, is_power_of_two


class UsageError(ValueError):
    """A bad option value: the command says which flag, which value and the fix, and exits 2."""


def _whole(flag: str, text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a whole number: give one like {flag} {max(least, 2)} "
                         f"or a comma list ({flag} 2,4)") from None
    if value < least:
        raise UsageError(f"{flag} {value} must be at least {least}")
    return value


def _positive(flag: str, text: str) -> int:
    return _whole(flag, text, 1)


def _power_of_two(flag: str, text: str) -> int:
    value = _positive(flag, text)
    if not is_power_of_two(value):
        raise UsageError(f"{flag} {value} is not a power of two (an IPU-POD runs 1, 2, 4, 8 ... IPUs per replica)")
    return value


def _one_of(choices: Sequence[str], fold: Callable[[str], str]) -> Callable[[str, str], str]:
    def parse(flag: str, text: str) -> str:
        value = fold(text.strip())
        if value not in choices:
            raise UsageError(f"{flag} {text!r} is not one of {', '.join(choices)}")
        return value
    return parse


def _proportion(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a number: give a proportion in (0, 1], e.g. {flag} 0.4") from None
    if not 0.0 < value <= 1.0:
        raise UsageError(f"{flag} {value} must be in (0, 1] (a reasonable range is 0.05 to 0.6)")
    return value


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _boolean(flag: str, text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE + _FALSE:
        return word in _TRUE
    raise UsageError(f"{flag} {text!r} is not true or false (also yes/no, on/off)")


# models.optim's rule names and the memory model's optimizer-state names
OPTIMIZERS = tuple(dict.fromkeys(("sgd", "nesterov", "lars", "adam", "adamw", *OPTIMIZER_STATE_SLOTS)))


@dataclass(frozen=True)
class PlanOption:
    flag: str
    field: str  # the IpuPlan field, or "global_batch"
    parse: Callable[[str, str], object]
    help: str


PLAN_OPTIONS: tuple[PlanOption, ...] = (
    PlanOption("--system", "system", _one_of(tuple(SYSTEMS), str.upper), "the IPU-POD: " + ", ".join(SYSTEMS)),
    PlanOption("--chip", "chip", _one_of(tuple(CHIPS), str.lower), "the IPU: " + ", ".join(CHIPS)),
    PlanOption("--global-batch", "global_batch", _positive, "images per weight update"),
    PlanOption("--micro-batch", "micro_batch", _positive, "images per replica per pass"),
    PlanOption("--gradient-accumulation", "gradient_accumulation", _positive,
               "micro-batches per replica per update; given, it is held and the global batch follows"),
    PlanOption("--ipus-per-replica", "ipus_per_replica", _power_of_two, "pipeline stages (a power of two)"),
    PlanOption("--precision", "precision", _one_of(tuple(PRECISIONS), str), "compute.weights: " + ", ".join(PRECISIONS)),
    PlanOption("--image-size", "image_size", _positive, "pixels per side"),
    PlanOption("--recompute", "recompute", _boolean, "recomputation: true or false"),
    PlanOption("--num-io-tiles", "num_io_tiles", lambda f, t: _whole(f, t, 0), "IO tiles per IPU (0: none)"),
    PlanOption("--available-memory-proportion", "available_memory_proportion", _proportion,
               "of tile memory for convolution temporaries, (0, 1]"),
    PlanOption("--optimizer", "optimizer", _one_of(OPTIMIZERS, str.lower), "the optimizer: " + ", ".join(OPTIMIZERS)),
)
OPTION_BY_FIELD = {o.field: o for o in PLAN_OPTIONS}


def parse_values(option: PlanOption, text: str) -> tuple:
    """One option's values from ``2`` or ``2,3,4`` (distinct, in the order given)."""
    items = [t.strip() for t in text.split(",")]
    if not all(items):
        raise UsageError(f"{option.flag} {text!r} has an empty item: write values separated by commas, e.g. "
                         f"{option.flag} 2,3,4")
    return tuple(dict.fromkeys(option.parse(option.flag, t) for t in items))


def parse_grid(given: Mapping[str, str | None]) -> dict[str, tuple]:
    """``{field: values}`` for the options given (``given`` maps fields to their text, ``None`` when absent)."""
    return {f: parse_values(OPTION_BY_FIELD[f], t) for f, t in given.items() if t is not None}


def combinations(grid: Mapping[str, Sequence]) -> list[dict[str, object]]:
    """One ``{field: value}`` per element of the product of the grid's values (the first option varies slowest)."""
    fields = list(grid)
    return [dict(zip(fields, values)) for values in itertools.product(*(grid[f] for f in fields))]


def is_sweep(grid: Mapping[str, Sequence]) -> bool:
    return any(len(v) > 1 for v in grid.values())


def batch_split(global_batch: int, micro_batch: int, replicas: int) -> int:
    """Gradient accumulation: global batch = micro-batch x replicas x GA; raises naming the flags when not whole."""
    per_pass = micro_batch * replicas
    if global_batch % per_pass:
        near = max(per_pass, round(global_batch / per_pass) * per_pass)
        raise ValueError(f"--global-batch {global_batch} is not a multiple of --micro-batch {micro_batch} x "
                         f"{replicas} replicas = {per_pass}: use --global-batch {near} or another micro-batch")
    return global_batch // per_pass


def replicas_for(system: str, ipus_per_replica: int) -> int:
    """Replicas that fill ``system``: its IPUs / IPUs per replica."""
    ipus = get_system(system).num_ipus
    if ipus_per_replica > ipus:
        raise ValueError(f"--ipus-per-replica {ipus_per_replica} is more than {system}'s {ipus} IPUs: "
                         "use a larger --system or fewer IPUs per replica")
    return ipus // ipus_per_replica


def plan_for(base: IpuPlan, choice: Mapping[str, object], momentum: float = 0.0,
             splits: Sequence[str] = ()) -> IpuPlan:
    """``base`` with one combination's values (see the module's rules); ``ValueError`` naming the flags
    when the combination cannot run (the IpuPlan's own checks included). ``splits``
    (``--pipeline-splits``) are the split of every row with ``len(splits) + 1`` IPUs per replica; rows
    with another count are split automatically."""
    system = str(choice.get("system", base.system))
    ipus = int(choice.get("ipus_per_replica", base.ipus_per_replica))  # type: ignore[arg-type]
    micro = int(choice.get("micro_batch", base.micro_batch))  # type: ignore[arg-type]
    refills = "system" in choice or "ipus_per_replica" in choice
    replicas = replicas_for(system, ipus) if refills else base.replicas
    if "gradient_accumulation" in choice:  # held: the global batch follows
        if "global_batch" in choice:
            raise UsageError("--global-batch and --gradient-accumulation both fix the batch: give one (the other "
                             "follows from the micro-batch and the replicas)")
        accumulation = int(choice["gradient_accumulation"])  # type: ignore[arg-type]
        global_batch = micro * replicas * accumulation
    else:
        global_batch = int(choice.get("global_batch", base.global_batch))  # type: ignore[arg-type]
        accumulation = batch_split(global_batch, micro, replicas)
    given = bool(splits) and len(splits) + 1 == ipus
    stages = ipus if ipus != base.ipus_per_replica or not base.device_mapping or splits else len(base.device_mapping)
    if stages > 1 and accumulation < 2 * stages:
        raise ValueError(f"--global-batch {global_batch} gives gradient accumulation {accumulation} with --micro-batch "
                         f"{micro} x {replicas} replicas, too few for a {stages}-stage pipeline (at least 2 x stages = "
                         f"{2 * stages}): use --global-batch {2 * stages * micro * replicas} or more, or fewer "
                         "--ipus-per-replica")
    fields = {k: v for k, v in choice.items() if k not in ("global_batch",)}
    if "optimizer" in fields:
        fields["optimizer"] = optimizer_state(str(fields["optimizer"]), momentum)
    fields.update(system=system, ipus_per_replica=ipus, micro_batch=micro, replicas=replicas,
                  gradient_accumulation=accumulation)
    if given:
        fields.update(pipeline_splits=tuple(splits), device_mapping=())
    elif ipus != base.ipus_per_replica or splits:
        fields.update(pipeline_splits=(), device_mapping=())  # balanced automatically
    if system != base.system:
        fields["num_hosts"] = get_system(system).max_hosts
    try:
        return replace(base, **fields)
    except ValueError as err:
        raise ValueError(f"{describe_choice(choice) or 'the configuration'}: {err}") from None


def batch_rule(grid: Mapping[str, Sequence], base: IpuPlan) -> str:
    """What a sweep holds fixed, the global batch or the gradient accumulation, in one line."""
    if "gradient_accumulation" in grid:
        held = ", ".join(map(str, grid["gradient_accumulation"]))
        return (f"gradient accumulation held at {held} (--gradient-accumulation): the global batch follows, "
                "micro-batch x replicas x accumulation")
    held = ", ".join(map(str, grid.get("global_batch", (base.global_batch,))))
    where = "--global-batch" if "global_batch" in grid else "the configuration's"
    return (f"global batch held at {held} ({where}): the gradient accumulation follows, global batch / (micro-batch "
            "x replicas); to hold the accumulation and let the global batch follow, give --gradient-accumulation")


def describe_choice(choice: Mapping[str, object]) -> str:
    """``--system POD16 --micro-batch 2``: a combination as the flags that give it."""
    def show(v: object) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return " ".join(f"{OPTION_BY_FIELD[f].flag} {show(v)}" for f, v in choice.items())
