"""``build_model(name, num_classes, **overrides)``: every model by name.

Names: ``efficientnet-b0`` .. ``efficientnet-b7``, ``efficientnet-tiny`` (width and depth 0.25,
32 px), suffixes ``-g16`` (group size 16, expansion 4) and ``-gn`` (group norm, 4 groups) in
any order (``efficientnet-b4-g16-gn``), and ``dense-mnist``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from models.dense_net import DenseNetConfig, build_dense_net
from models.efficientnet import COEFFICIENTS, EfficientNetConfig, build_efficientnet
from models.layer import Rng
from models.mbconv import NormSpec
from models.model import Model

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
    if "groups" in overrides:
        overrides["norm_groups"] = overrides.pop("groups")
    for key in list(overrides):
        if key in _NORM_KEYS:
            norm[_NORM_KEYS[key]] = overrides.pop(key)
    known = {f.name for f in dataclasses.fields(EfficientNetConfig)} - {"norm"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"model {name!r}: unknown overrides {unknown}; known: {sorted(known | set(_NORM_KEYS))}")
    fields.update(overrides)
    return EfficientNetConfig(norm=NormSpec(**norm), **fields)


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
    cfg = efficientnet_config(name, 1000 if num_classes is None else num_classes, **overrides)
    blocks = build_efficientnet(cfg, rng, dtype, seed)
    return Model(name, blocks, (cfg.resolution, cfg.resolution, cfg.in_channels), rng, dtype, cfg)
