"""The training configuration: nested frozen dataclasses, one per section, each checking its own fields.

``launch.train.config_file.load_config`` reads one from ``configs.yml`` and ``--set`` overrides; under the
launcher, ``launch.train.distribute`` fits it to the launcher's replicas and system and gives this
instance's placement. ``optim``, ``loss_scaling`` and the schedule's fields are the numerics engine's own
configs (``models.optim``, ``models.optim.loss_scaling``, ``models.optim.schedules``), so their validation
applies unchanged. No field reads a file: ``model.onnx`` is a path that ``launch.train.build.open_model_file``
reads (once), before the run directory is made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from ipu.pipeline.split import check_pipeline_splits
from ipu.precision import PRECISIONS
from models.optim import OptimConfig
from models.optim.loss_scaling import LossScaleConfig
from models.optim.schedules import ScheduleConfig, lr_from_exponent


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
    # read and checked by launch.train.build.open_model_file, never here
    num_classes: int | None = None  # with ``onnx``: replace the final classifier for the dataset's classes

    def __post_init__(self) -> None:
        if self.num_classes is not None and self.num_classes < 1:
            raise ValueError(f"model.num_classes={self.num_classes} must be >= 1")
        if self.onnx != self.onnx.strip():
            raise ValueError(f"model.onnx={self.onnx!r} has spaces around the path: give the path alone")

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
