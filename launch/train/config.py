"""The training configuration: nested frozen dataclasses, named presets in ``configs.yml``.

    cfg = load_config("default", ["optim.momentum=0.8", "run.epochs=2"])

Under the launcher, ``launch.train.distribute`` fits the configuration to the launcher's replicas and
system and gives this instance's placement.

Each YAML entry has the sections below (``data``, ``model``, ``optim``, ``schedule``,
``loss_scaling``, ``ema``, ``ipu``, ``run``); a field left out keeps its default. YAML anchors
share parts between entries (``optim: {<<: *lars, momentum: 0.9}``); top-level keys starting
with ``_`` hold those anchors and are not configurations. Overrides ``section.field=value``
(values parsed as YAML) win over the file. Unknown sections or fields raise ``ValueError``
naming the key and the valid ones. ``optim``, ``loss_scaling`` and the schedule's fields are
the numerics engine's own configs (``models.optim``, ``models.optim.loss_scaling``,
``models.optim.schedules``), so their validation applies unchanged.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from ipu.pipeline.split import check_pipeline_splits
from ipu.plan import get_preset
from ipu.precision import PRECISIONS
from launch.train.config_keys import suggest
from models.optim.loss_scaling import LossScaleConfig
from models.optim import OptimConfig
from models.optim.schedules import ScheduleConfig, lr_from_exponent

CONFIGS_FILE = Path(__file__).with_name("configs.yml")


@dataclass(frozen=True)
class DataConfig:
    """The dataset, the batch split and the augmentation (host crop/flip, device mixup/cutmix).

    Global batch = ``micro_batch * grad_accum * replicas``. ``replicas`` is the total when the
    program runs alone; under the launcher its ``--num-replicas`` wins, unless ``data.replicas`` is
    given on the command line, which must then agree (see :func:`launch.train.distribute.distribute`).
    """

    path: str = "data/fashion-mnist-subset.h5"
    micro_batch: int = 16
    grad_accum: int = 1
    replicas: int = 1
    augment: bool = False  # random-resized crop + flip on the host (uint8)
    crop_scale: tuple[float, float] = (0.08, 1.0)
    flip: bool = True
    mixup_alpha: float = 0.0  # on the device; 0 turns it off (recipe: 0.2)
    cutmix_lambda: float = 0.0  # fraction of the image kept; 0 turns it off (recipe: 0.85)
    eval_micro_batch: int = 0  # 0: the training micro-batch
    cache: str = "auto"
    validation_fraction: float = 0.0  # > 0: validation carved from the training images, the file's held-out split is the test split (data/split.py)
    split_seed: int = 0  # which images the carve holds out

    def __post_init__(self) -> None:
        for name in ("micro_batch", "grad_accum", "replicas"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.{name}={getattr(self, name)!r} must be >= 1")
        if not 0.0 <= self.cutmix_lambda < 1.0:
            raise ValueError(f"data.cutmix_lambda={self.cutmix_lambda!r} must be in [0, 1) (0 turns cutmix off)")
        if self.mixup_alpha < 0.0:
            raise ValueError(f"data.mixup_alpha={self.mixup_alpha!r} must be >= 0 (0 turns mixup off)")
        if not 0.0 <= self.validation_fraction < 1.0 or self.split_seed < 0:
            raise ValueError(f"data.validation_fraction={self.validation_fraction!r} must be in [0, 1) and data.split_seed="
                             f"{self.split_seed!r} >= 0 (0: evaluate on the file's validation split)")


@dataclass(frozen=True)
class ModelConfig:
    """``models.build_model(name, num_classes, **options)``; classes and channels come from the data."""

    name: str = "efficientnet-tiny"
    options: tuple[tuple[str, Any], ...] = ()
    label_smoothing: float = 0.0
    onnx: str = ""  # a user's network (models.onnx.network): trained instead of ``name``; the file is
    # read and checked by launch.train.build.check_model, never here
    num_classes: int | None = None  # with ``onnx``: replace the final classifier for the dataset's classes

    def __post_init__(self) -> None:
        if self.num_classes is not None and self.num_classes < 1:
            raise ValueError(f"model.num_classes={self.num_classes} must be >= 1")

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True)
class ScheduleSection(ScheduleConfig):
    """``models.optim.schedules.ScheduleConfig`` plus Graphcore's ``lr_exponent``: when set, the peak
    rate is ``2**lr_exponent * global_batch`` and ``base_lr`` is ignored."""

    lr_exponent: float | None = None

    def resolve(self, global_batch: int) -> ScheduleConfig:
        values = {f.name: getattr(self, f.name) for f in fields(ScheduleConfig)}
        if self.lr_exponent is not None:
            values["base_lr"] = lr_from_exponent(self.lr_exponent, global_batch)
        return ScheduleConfig(**values)


@dataclass(frozen=True)
class EmaConfig:
    """Weight averaging for evaluation: off when ``decay`` is 0. ``every``: ``step`` (EfficientNet)
    or ``epoch`` (Graphcore's per-epoch float64 average)."""

    decay: float = 0.0
    every: str = "step"
    use_num_updates: bool = False
    float64: bool = False

    def __post_init__(self) -> None:
        if self.every not in ("step", "epoch"):
            raise ValueError(f"ema.every={self.every!r} must be 'step' or 'epoch'")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"ema.decay={self.decay!r} must be in [0, 1) (0 turns the average off)")


@dataclass(frozen=True)
class IpuConfig:
    """How each replica maps onto simulated IPUs, how it is fed, and what the POD prediction assumes.

    Before the first step the run is "compiled" (``launch.train.build.compile_ipu``): its ``IpuPlan`` is
    placed on the IPUs' tiles and a program that does not fit stops the run. ``check_fit: false``
    skips that for CPU-only experiments whose shape no IPU-POD could run (replicas not a power of
    two, too few micro-batches for the pipeline, ...).
    """

    ipus_per_replica: int = 1
    pipeline_splits: tuple[str, ...] = ()  # first block of each later stage
    pipeline_schedule: str = "grouped"
    recompute: bool = True
    precision: str = "16.16"  # 32.32, 16.32 or 16.16: the memory fit and the prediction; see emulate_precision
    emulate_precision: bool = False  # true: the CPU rounds input, weights, partials (and 16.16 storage) to float16
    stochastic_rounding: bool = True  # 16.16 emulation: weight updates stored with stochastic rounding
    available_memory_proportion: float = 0.6
    num_io_tiles: int = 0
    system: str = ""  # POD for the prediction; "" = the smallest that holds the replicas
    num_hosts: int = 1  # host servers feeding the POD (host IO bandwidth in the prediction)
    chip: str = "mk2"  # mk1, mk2 or bow: the IPU the memory fit and the prediction assume
    check_fit: bool = True  # false: no memory fit before the first step (CPU-only shapes)
    prefetch_micro_batches: int = 3  # micro-batches ready ahead of each replica: the IO tiles and the loader's thread
    device_iterations: int = 1  # weight updates per host call

    def __post_init__(self) -> None:
        for name in ("ipus_per_replica", "device_iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"ipu.{name}={getattr(self, name)!r} must be >= 1")
        if self.prefetch_micro_batches < 0:
            raise ValueError(f"ipu.prefetch_micro_batches={self.prefetch_micro_batches!r} must be >= 0 (0: no prefetch, the "
                             "training thread builds each batch)")
        if self.precision not in PRECISIONS:
            raise ValueError(f"ipu.precision={self.precision!r} is not a precision mode: choose one of "
                             f"{', '.join(PRECISIONS)} (compute.weights widths, e.g. 16.16)")
        if self.num_io_tiles < 0:
            raise ValueError(f"ipu.num_io_tiles={self.num_io_tiles!r} must be >= 0 (0: no IO tiles)")
        check_pipeline_splits(self.pipeline_splits, self.ipus_per_replica, "ipu.pipeline_splits")


@dataclass(frozen=True)
class RunConfig:
    """The training loop: length, seeds, where outputs go, checkpoints, checks and logs."""

    epochs: float = 1.0
    max_steps: int = 0  # 0: run all epochs; else stop after this many updates (the schedule still spans the epochs)
    seed: int = 0
    run_dir: str = "runs/{n}"  # {n}: the next free number, {time}: the start time (launch.train.run_dir)
    checkpoint_every: int = 0  # weight updates between checkpoints; 0: only at the end of each epoch
    keep_checkpoints: int = 2
    checksum_every: int = 50  # weight updates between cross-instance weight checksums; 0: never
    evaluate: bool = True
    evaluate_test: bool = False  # at the end, the test split too (needs data.validation_fraction > 0)
    update_stats_every: int = 0  # updates between per-group trust ratio / step / drift records (models.optim.probe); 0: off
    plots: bool = True
    progress_bar: bool = True
    gradient_dtype: str = "float64"  # the engine's flat gradient buffer (see ipu.runtime.engine.Engine)
    tensorboard: bool | str = "auto"  # TensorBoard event files: auto (when tensorboardX is installed), true, false
    tensorboard_every: int = 25  # updates per TensorBoard training point (their mean); metrics.jsonl has every one

    def __post_init__(self) -> None:
        if not self.epochs > 0:
            raise ValueError(f"run.epochs={self.epochs!r} must be > 0")
        for name in ("max_steps", "checkpoint_every", "checksum_every", "seed", "update_stats_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"run.{name}={getattr(self, name)!r} must be >= 0")
        if self.gradient_dtype not in ("float32", "float64"):
            raise ValueError(f"run.gradient_dtype={self.gradient_dtype!r} must be float32 or float64")
        if self.tensorboard not in ("auto", True, False):
            raise ValueError(f"run.tensorboard={self.tensorboard!r} must be auto, true or false")
        if self.keep_checkpoints < 1:
            raise ValueError(f"run.keep_checkpoints={self.keep_checkpoints!r} must be >= 1")
        if self.tensorboard_every < 1:
            raise ValueError(f"run.tensorboard_every={self.tensorboard_every!r} must be >= 1 (updates per "
                             "TensorBoard point; 1 writes every update)")


@dataclass(frozen=True)
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    loss_scaling: LossScaleConfig = field(default_factory=lambda: LossScaleConfig(initial_scale=1.0))
    ema: EmaConfig = field(default_factory=EmaConfig)
    ipu: IpuConfig = field(default_factory=IpuConfig)
    run: RunConfig = field(default_factory=RunConfig)

    @property
    def global_batch(self) -> int:
        return self.data.micro_batch * self.data.grad_accum * self.data.replicas

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict (JSON/YAML-safe): ``model.options`` as a mapping, tuples as lists."""
        out = {}
        for f in fields(self):
            section = dataclasses.asdict(getattr(self, f.name))
            if f.name == "model":
                section["options"] = dict(section["options"])
            out[f.name] = {k: list(v) if isinstance(v, tuple) else v for k, v in section.items()}
        return out


SECTIONS: dict[str, type] = {f.name: f.default_factory().__class__ for f in fields(TrainConfig)}  # type: ignore[misc]


def load_config(name_or_path: str = "default", overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The named entry of ``launch/train/configs.yml`` (or of a YAML file ``path[:name]``) with overrides."""
    path, name = _locate(name_or_path)
    with open(path) as f:
        entries = yaml.safe_load(f) or {}
    names = sorted(k for k in entries if not str(k).startswith("_"))
    if name not in names:
        raise ValueError(f"no configuration {name!r} in {path}; choose one of {', '.join(names)}")
    raw = _plain(entries[name]) or {}
    if isinstance(raw, dict) and "preset" in raw:
        raw = _merged(preset_sections(raw.pop("preset")), raw)
    for item in overrides:
        _apply_override(raw, item)
    _drop_replaced(raw, overrides)
    return from_dict(raw, source=f"{path}:{name}")


# Keys that say the same thing two ways: setting one on the command line drops the other from the file.
ALTERNATIVES = (("schedule.warmup_steps", "schedule.warmup_epochs"), ("schedule.base_lr", "schedule.lr_exponent"))


def override_keys(overrides: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The ``section.field`` keys that ``--set`` overrides name."""
    return frozenset(item.partition("=")[0].strip() for item in overrides)


def _drop_replaced(raw: dict, overrides: list[str] | tuple[str, ...]) -> None:
    given = override_keys(overrides)
    for a, b in ALTERNATIVES:
        for mine, other in ((a, b), (b, a)):
            if mine in given and other not in given:
                section, key = other.split(".")
                if isinstance(raw.get(section), dict):
                    raw[section].pop(key, None)


def preset_sections(name: str) -> dict[str, dict[str, Any]]:
    """The fields an ``ipu.plan`` preset fixes, as config sections: the batch split (``data``), how
    each replica maps onto the IPUs (``ipu``) and the epochs (``run``). A ``configs.yml`` entry with
    ``preset: NAME`` starts from these, so the recipe's numbers are written once, in ``ipu/plan.py``."""
    try:
        plan = get_preset(name)
    except ValueError as err:
        raise ValueError(f"configuration key preset: {err}") from None
    return {
        "data": {"micro_batch": plan.micro_batch, "grad_accum": plan.gradient_accumulation, "replicas": plan.replicas},
        "ipu": {"ipus_per_replica": plan.ipus_per_replica, "pipeline_splits": list(plan.pipeline_splits),
                "pipeline_schedule": plan.schedule, "recompute": plan.recompute, "precision": plan.precision,
                "available_memory_proportion": plan.available_memory_proportion, "num_io_tiles": plan.num_io_tiles,
                "prefetch_micro_batches": plan.prefetch_micro_batches, "system": plan.system, "num_hosts": plan.num_hosts,
                "chip": plan.chip, "device_iterations": plan.device_iterations},
        "run": {"epochs": plan.epochs},
    }


def _merged(base: dict, top: dict) -> dict:
    """``top`` over ``base``, section by section."""
    out = {k: dict(v) for k, v in base.items()}
    for key, value in top.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) and key in out else value
    return out


def _locate(name_or_path: str) -> tuple[Path, str]:
    if name_or_path.endswith((".yml", ".yaml")) or ":" in name_or_path:
        file, _, name = name_or_path.partition(":")
        path = Path(file)
        if not path.is_file():
            raise ValueError(f"config file {file!r} does not exist")
        return path, name or "default"
    return CONFIGS_FILE, name_or_path


def _plain(value: Any) -> Any:
    """A deep copy with dicts and lists only (YAML anchors share objects between entries)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _apply_override(raw: dict, item: str) -> None:
    key, eq, text = item.partition("=")
    parts = key.strip().split(".")
    if not eq or len(parts) < 2 or not all(parts):
        raise ValueError(f"override {item!r}: write section.field=value, for example optim.momentum=0.9")
    if parts[0] not in SECTIONS:
        raise ValueError(f"override {item!r}: unknown section {parts[0]!r}{suggest(key.strip(), SECTIONS)}; sections are "
                         f"{', '.join(SECTIONS)} (poprun-train --list-keys lists every key)")
    target = raw
    for part in parts[:-1]:
        node = target.get(part)
        if not isinstance(node, dict):
            node = target[part] = {}
        target = node
    target[parts[-1]] = yaml.safe_load(text) if text.strip() else None


def from_dict(raw: dict, source: str = "config") -> TrainConfig:
    """Build a TrainConfig from nested plain data, naming any unknown key and the valid ones."""
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: a configuration is a mapping of sections, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise ValueError(f"{source}: unknown section {unknown[0]!r}; valid sections are {', '.join(SECTIONS)}")
    built = {name: _section(cls, raw.get(name) or {}, f"{source}: {name}") for name, cls in SECTIONS.items()}
    return TrainConfig(**built)


def _section(cls: type, values: dict, where: str):
    if not isinstance(values, dict):
        raise ValueError(f"{where} must be a mapping of fields, got {values!r}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        section = where.rsplit(": ", 1)[-1]
        raise ValueError(f"{where}.{unknown[0]}: unknown key{suggest(f'{section}.{unknown[0]}', SECTIONS)}; valid keys of "
                         f"{section} are {', '.join(valid)} (poprun-train --list-keys lists every key)")
    kwargs = {}
    for key, value in values.items():
        if key == "options" and cls is ModelConfig:
            if not isinstance(value, dict):
                raise ValueError(f"{where}.options must be a mapping of build_model overrides, got {value!r}")
            kwargs[key] = tuple(sorted(value.items()))
        else:
            kwargs[key] = _coerce(value, hints[key], f"{where}.{key}")
    if cls is LossScaleConfig:
        kwargs.setdefault("initial_scale", 1.0)  # no scaling unless asked for
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """YAML to the field's type: '1e-5' to float, lists to tuples, ints to floats."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ValueError(f"{where}: a value is required")
    for t in options:
        origin = typing.get_origin(t) or t
        if origin is tuple and isinstance(value, (list, tuple)):
            return tuple(value)
        if t is bool and isinstance(value, bool):
            return value
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if t is float and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                continue
        if t is str and isinstance(value, str):
            return value
    if str in options and isinstance(value, (int, float)):  # YAML read 16.16 as a number
        key = where.split(": ")[-1]
        raise ValueError(f"{where}={value!r} must be a string; quote it in YAML: --set \"{key}='{value}'\"")
    raise ValueError(f"{where}={value!r} is not {_describe(options)}")


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def _describe(options: tuple) -> str:
    """What a field takes, in words: ``an integer``, ``a number or null``, ``a list``."""
    words = [_KINDS.get(t, "a list" if (typing.get_origin(t) or t) is tuple else getattr(t, "__name__", str(t)))
             for t in options]
    return " or ".join(dict.fromkeys(words))
