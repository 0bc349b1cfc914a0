"""Layer names short enough for a table, and still telling the rows apart.

An imported graph names its layers by their path (``/features/features.10/block/block.1/Conv``);
cut at a column's width they all read ``/features/features.10/block/block.`` and say nothing. A
table shows each name's shortest suffix of whole path parts that no other row ends with
(``features.10/block/block.1/Conv``), marked ``…/`` where parts were left out; the column is as wide
as the longest of those, up to ``max_width``, beyond which a name keeps its last characters.
"""

from __future__ import annotations

from collections.abc import Sequence

ELLIPSIS = "…"


def _parts(name: str) -> list[str]:
    return [p for p in name.split("/") if p] or [name]


def short_names(names: Sequence[str], max_width: int = 60) -> dict[str, str]:
    """``{name: what the table shows}``: the shortest unique suffix of whole ``/`` parts of each name."""
    parts = {name: _parts(name) for name in names}
    out = {}
    for name, mine in parts.items():
        for k in range(1, len(mine) + 1):
            tail = mine[-k:]
            if not any(other != name and theirs[-k:] == tail for other, theirs in parts.items()):
                break
        text = f"{ELLIPSIS}/{'/'.join(tail)}" if k < len(mine) else name
        if len(text) > max_width:
            text = ELLIPSIS + text[-(max_width - 1):]
        out[name] = text
    return out


def column_width(shown: Sequence[str], minimum: int = 5) -> int:
    """The width of a column holding ``shown``."""
    return max([minimum, *map(len, shown)])


__all__ = ["ELLIPSIS", "column_width", "short_names"]
