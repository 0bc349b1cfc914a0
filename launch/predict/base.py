"""What the plan options of ``poprun-ipu predict|profile`` start from: a configuration's plan (``--config``
with ``--set``, through ``launch.train``'s keys and checks) or a preset's (``--preset``); with ``--onnx FILE``,
that plan with the model of the user's own network (:func:`onnx_base`: the file read once by ``models.onnx``,
its rows the sweep's ``profile_for`` hook)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu.plan import IMAGENET_TRAIN_IMAGES, IpuPlan, get_preset
from launch.predict.sweep import UsageError
from launch.train.config_file import load_config
from launch.train.plan import graph_plan, ipu_plan
from models.onnx import OnnxFile, folded_norm_warning, open_for_prediction
from models.profile import LayerProfile

IMAGENET_CLASSES = 1000

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Base:
    """What the plan options start from: a configuration's (or preset's) plan and its name."""

    name: str
    plan: IpuPlan
    momentum: float = 0.0  # the optimizer's, for --optimizer sgd/nesterov
    note: str = ""  # what was assumed (stderr)


def base_plan(config: str | None, preset: str | None, sets: Sequence[str], onnx: bool = False) -> Base:
    """The plan of ``--config`` (with ``--set``) or of ``--preset``; ``onnx``: ``--onnx FILE`` gives the model."""
    if preset:
        if sets:
            raise UsageError(f"--set needs --config (a preset has no configuration keys): use --config with a "
                             f"configs.yml entry, or the plan options (--micro-batch ...) with --preset {preset}")
        return Base(preset, get_preset(preset))
    try:
        cfg = load_config(config or "default", list(sets))
    except ValueError as err:
        raise UsageError(f"--config {config} {' '.join('--set ' + s for s in sets)}: {err}".replace("  ", " ")) from None
    if cfg.model.onnx and not onnx:
        raise UsageError(f"--config {config}: model.onnx={cfg.model.onnx} is your own network: add --onnx "
                         f"{cfg.model.onnx} (the configuration gives the rest of the plan)")
    shape, classes, images, note = dataset_facts(cfg)
    try:
        plan = ipu_plan(cfg, shape, classes, images)
    except ValueError as err:
        raise UsageError(f"--config {config}: no IPU-POD can run this configuration: {err}") from None
    return Base(str(config), plan, cfg.optim.momentum, note)


def dataset_facts(cfg) -> tuple[tuple[int, int, int], int, int, str]:
    """Image shape, classes and training images of the configuration's dataset; ImageNet's (at the model's
    ``resolution`` option, else 224) when the file is not here (a prediction needs no data)."""
    from data.dataset import open_dataset
    from data.sources import dataset_path

    path = Path(dataset_path(cfg.data.path))
    if path.is_file():
        info = open_dataset(path, "train").info
        return info.image_shape, info.num_classes, info.num_samples, ""
    size = int(cfg.model.kwargs.get("resolution", 224))
    return ((size, size, 3), IMAGENET_CLASSES, IMAGENET_TRAIN_IMAGES,
            f"{cfg.data.path} is not here: assuming ImageNet ({IMAGENET_CLASSES} classes, "
            f"{IMAGENET_TRAIN_IMAGES:,} training images, {size}x{size}x3)")


def onnx_base(path: str, base: Base, image_sizes: Sequence[int] = (), num_classes: int | None = None,
              splits: Sequence[str] = ()) -> tuple[Callable[[IpuPlan], list[LayerProfile]], Base]:
    """``--onnx FILE``: the graph's rows at a plan's micro-batch and image size (the sweep's ``profile_for``)
    and ``base`` with the graph's model (``launch.train.plan.graph_plan``); the options are checked against the
    graph (``models.onnx.open_for_prediction``)."""
    file = OnnxFile(path, f"--onnx {path}")
    profiles, probe, classes = open_for_prediction(file, base.plan.micro_batch, image_sizes, num_classes, splits)
    warning = folded_norm_warning(probe, file.shown, "the prediction leaves out the norms' cost")
    if warning:
        logger.warning(warning)
    plan = graph_plan(base.plan, file.label, probe, classes)
    return (lambda p: profiles.rows(p.micro_batch, p.image_size)), Base(Path(path).stem, plan, base.momentum, base.note)
