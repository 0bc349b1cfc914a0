"""The training configuration's keys, for people: every key with its type and default, and the
keys closest to a mistyped one.

Pure functions of the config's section classes (``launch.train.config.SECTIONS``), so that they list
exactly what ``--set`` accepts.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

# Names people reach for first, and where the value lives here.
ALIASES = {
    "lr": "schedule.base_lr", "learning_rate": "schedule.base_lr", "base_lr": "schedule.base_lr",
    "batch_size": "data.micro_batch", "batch": "data.micro_batch", "micro_batch_size": "data.micro_batch",
    "gradient_accumulation": "data.grad_accum", "accumulation": "data.grad_accum",
    "warmup": "schedule.warmup_epochs", "steps": "run.max_steps", "optimizer": "optim.name",
    "model": "model.name", "dataset": "data.path", "output": "run.run_dir", "out": "run.run_dir",
}


def all_keys(sections: dict[str, type]) -> list[str]:
    return [f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)]


def suggest(key: str, sections: dict[str, type]) -> str:
    """``"; did you mean schedule.base_lr?"`` for a mistyped ``section.field`` (or ``""``): the same
    field in another section, a common alias, then the nearest spellings."""
    keys = all_keys(sections)
    field = key.rsplit(".", 1)[-1]
    found = [k for k in keys if k.rsplit(".", 1)[-1] == field]
    if field in ALIASES:
        found.append(ALIASES[field])
    found += difflib.get_close_matches(key, keys, n=2, cutoff=0.75)
    by_field = {k.rsplit(".", 1)[-1]: k for k in keys}
    found += [by_field[f] for f in difflib.get_close_matches(field, list(by_field), n=2, cutoff=0.75)]
    found = list(dict.fromkeys(k for k in found if k != key))[:3]
    return f"; did you mean {' or '.join(found)}?" if found else ""


def describe_keys(sections: dict[str, type], current: dict[str, dict[str, Any]] | None = None) -> str:
    """One line per key: ``section.field  type  default`` and, where ``current`` (a config's
    ``to_dict()``) differs from the default, its value there. A field that a configuration file
    leaves out takes the default shown here."""
    rows = [("key", "type", "default", "this config" if current is not None else "")]
    for name, cls in sections.items():
        hints = typing.get_type_hints(cls)
        defaults = dataclasses.asdict(cls())
        for f in dataclasses.fields(cls):
            default = _plain(defaults[f.name])
            kind = _type_name(hints[f.name])
            if (name, f.name) == ("model", "options"):  # build_model's keyword arguments
                default, kind = {}, "mapping"
            value = _plain(current[name][f.name]) if current is not None else default
            rows.append((f"{name}.{f.name}", kind, _show(default),
                         _show(value) if value != default else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if not isinstance(value, str) else (value or "''")


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if args and (typing.get_origin(hint) in (typing.Union,) or type(hint).__name__ == "UnionType"):
        return " | ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "list"
    return getattr(hint, "__name__", str(hint))
