"""The records an agent sends the launcher over its rank's stdout, one line each.

MPI launchers forward each rank's stdout, also from remote hosts, and keep a line written with
one ``write`` whole; so every record is a single line starting with a record separator byte,
written at once. Anything else on the stream (the MPI launcher's own messages) passes through.
"""

from __future__ import annotations

import json

MARK = b"\x1e"

# Record types.
START = "start"  # i, pid, host, cpus
OUT = "out"  # i, s ("out"|"err"), k ("line"|"frame"), x (text without its terminator)
PROGRESS = "progress"  # i, what, n (reports so far)
EXIT = "exit"  # i, code, signal, duration, stopped, ended_at (epoch s), error (dict|None), tail (list[str])


def encode(kind: str, **fields: object) -> bytes:  # (no typing import: see poprun_py/__init__.py)
    return MARK + json.dumps({"t": kind, **fields}, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, object] | None:
    """The record in ``line``, or None for a line that is not one of ours."""
    if not line.startswith(MARK):
        return None
    try:
        record = json.loads(line[1:])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "t" in record else None
