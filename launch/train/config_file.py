"""Reading a training configuration: an entry of ``configs.yml`` (or of a YAML file), ``--set`` overrides.

    cfg = load_config("default", ["optim.momentum=0.8", "run.epochs=2"])

Each YAML entry has the sections of ``launch.train.config.TrainConfig`` (``data``, ``model``, ``optim``,
``schedule``, ``loss_scaling``, ``ema``, ``ipu``, ``run``); a field left out keeps its default. YAML anchors
share parts between entries (``optim: {<<: *lars, momentum: 0.9}``); top-level keys starting with ``_`` hold
those anchors and are not configurations. ``preset: NAME`` starts an entry from the sections of an ``ipu.plan``
preset (``launch.train.plan.plan_sections``). Overrides ``section.field=value`` (values parsed as YAML) win
over the file. Unknown sections or fields raise ``ValueError`` naming the key and the valid ones; values are
coerced to the fields' types (:func:`from_dict`).
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from ipu.plan import get_preset
from launch.train.config import SECTIONS, ModelConfig, TrainConfig
from launch.train.config_keys import suggest
from launch.train.plan import plan_sections
from models.optim.loss_scaling import LossScaleConfig

CONFIGS_FILE = Path(__file__).with_name("configs.yml")


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
        raw = _merged(_preset_sections(raw.pop("preset")), raw)
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


def _preset_sections(name: str) -> dict[str, dict[str, Any]]:
    """The config sections of the ``ipu.plan`` preset ``name`` (``launch.train.plan.plan_sections``)."""
    try:
        plan = get_preset(name)
    except ValueError as err:
        raise ValueError(f"configuration key preset: {err}") from None
    return plan_sections(plan)


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
