"""``build_model(name, num_classes, **overrides)``: every model by name.

Names: ``efficientnet-b0`` .. ``efficientnet-b7``, ``efficientnet-tiny`` (width and depth 0.25,
32 px), suffixes ``-g16`` (group size 16, expansion 4) and ``-gn`` (group norm, 4 groups) in
any order (``efficientnet-b4-g16-gn``); ``resnet18``, ``resnet34``, ``resnet50``, ``resnet101``,
``resnet152`` with an optional ``-gn`` (group norm, 32 groups); and ``dense-mnist``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from models.dense_net import DenseNetConfig, build_dense_net
from models.efficientnet import COEFFICIENTS, EfficientNetConfig, build_efficientnet
from models.conv_norm import NormSpec
from models.efficientnet import param_count as efficientnet_param_count
from models.layer import Rng
from models.model import Model
from models.resnet import ARCHITECTURES, ResNetConfig, build_resnet, resnet_param_count

_NORM_KEYS = {"norm": "kind", "norm_groups": "groups", "epsilon": "eps", "norm_eps": "eps",
              "bn_momentum": "momentum"}


def efficientnet_config(name: str, num_classes: int = 1000, **overrides) -> EfficientNetConfig:
    """The config for an ``efficientnet-*`` name with overrides applied.

    Overrides: width, depth, resolution, dropout, drop_connect, group_size, expand_ratio,
    in_channels, padding, and for the norm: norm (``batch``/``group``), norm_groups (alias
    groups), epsilon, bn_momentum.
    """
    parts = name.lower().split("-")
    if parts[0] != "efficientnet" or len(parts) < 2 or parts[1] not in COEFFICIENTS:
        raise ValueError(f"model {name!r}: expected efficientnet-<{'|'.join(COEFFICIENTS)}>[-g16][-gn]")
    width, depth, resolution, dropout = COEFFICIENTS[parts[1]]
    fields: dict = dict(width=width, depth=depth, resolution=resolution, dropout=dropout, num_classes=num_classes)
    norm: dict = {}
    for suffix in parts[2:]:
        if suffix == "g16":
            fields.update(group_size=16, expand_ratio=4)
        elif suffix == "gn":
            norm.update(kind="group", groups=4)
        else:
            raise ValueError(f"model {name!r}: unknown suffix {suffix!r} (use -g16 and/or -gn)")
    fields.update(_split_overrides(name, EfficientNetConfig, norm, overrides))
    return EfficientNetConfig(norm=NormSpec(**norm), **fields)


def resnet_config(name: str, num_classes: int = 1000, **overrides) -> ResNetConfig:
    """The config for a ``resnet*`` name with overrides applied.

    Overrides: layers (blocks per stage), bottleneck, width (stem channels, 64), resolution,
    in_channels, and for the norm: norm (``batch``/``group``), norm_groups (alias groups),
    epsilon, bn_momentum. Batch norm defaults to torch's epsilon 1e-5 and momentum 0.1.
    """
    arch, _, suffix = name.lower().partition("-")
    if arch not in ARCHITECTURES or suffix not in ("", "gn"):
        raise ValueError(f"model {name!r}: expected <{'|'.join(ARCHITECTURES)}>[-gn]")
    layers, bottleneck = ARCHITECTURES[arch]
    default = ResNetConfig().norm
    norm: dict = dict(kind="group" if suffix else "batch", groups=default.groups, eps=default.eps,
                      momentum=default.momentum)
    fields: dict = dict(layers=layers, bottleneck=bottleneck, num_classes=num_classes)
    fields.update(_split_overrides(name, ResNetConfig, norm, overrides))
    if "layers" in fields:
        fields["layers"] = tuple(fields["layers"])
    return ResNetConfig(norm=NormSpec(**norm), **fields)


def _split_overrides(name: str, config_type, norm: dict, overrides: dict) -> dict:
    """Move the norm overrides into ``norm``; return the rest, which must be fields of ``config_type``."""
    overrides = dict(overrides)
    if "groups" in overrides:
        overrides["norm_groups"] = overrides.pop("groups")
    for key in list(overrides):
        if key in _NORM_KEYS:
            norm[_NORM_KEYS[key]] = overrides.pop(key)
    known = {f.name for f in dataclasses.fields(config_type)} - {"norm"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"model {name!r}: unknown overrides {unknown}; known: {sorted(known | set(_NORM_KEYS))}")
    return overrides


def model_config(name: str, num_classes: int = 1000, **overrides):
    """The frozen config of any convolutional model name (EfficientNet or ResNet), without building it."""
    if name.lower().startswith("resnet"):
        return resnet_config(name, num_classes, **overrides)
    return efficientnet_config(name, num_classes, **overrides)


def param_count(config) -> int:
    """Trainable parameters of an ``EfficientNetConfig`` or ``ResNetConfig``, counted without building."""
    if isinstance(config, ResNetConfig):
        return resnet_param_count(config)
    if isinstance(config, EfficientNetConfig):
        return efficientnet_param_count(config)
    raise TypeError(f"param_count: expected an EfficientNetConfig or ResNetConfig, got {type(config).__name__}")


def build_model(name: str, num_classes: int | None = None, dtype=np.float32, seed: int = 0, **overrides) -> Model:
    """Build a model by name; ``dtype=np.float64`` for gradient checks; ``seed`` for init."""
    rng = Rng(np.random.default_rng(seed))
    if name == "dense-mnist":
        if num_classes is not None:
            overrides["num_classes"] = num_classes
        known = {f.name for f in dataclasses.fields(DenseNetConfig)}
        if set(overrides) - known:
            raise ValueError(f"model {name!r}: unknown overrides {sorted(set(overrides) - known)}; "
                             f"known {sorted(known)}")
        if "hidden" in overrides:
            overrides["hidden"] = tuple(overrides["hidden"])
        cfg = DenseNetConfig(**overrides)
        return Model(name, build_dense_net(cfg, dtype, seed), (cfg.resolution, cfg.resolution, cfg.in_channels),
                     rng, dtype, cfg)
    cfg = model_config(name, 1000 if num_classes is None else num_classes, **overrides)
    if isinstance(cfg, ResNetConfig):
        return Model(name, build_resnet(cfg, dtype, seed), (cfg.resolution, cfg.resolution, cfg.in_channels),
                     rng, dtype, cfg)
    blocks = build_efficientnet(cfg, rng, dtype, seed)
    return Model(name, blocks, (cfg.resolution, cfg.resolution, cfg.in_channels), rng, dtype, cfg)
