"""Where a study's row came from, and whether a recorded row still stands for the point the study asks for.

Every row records the code (git commit, whether tracked files differed from it and a hash of that
difference), a SHA-256 of the dataset file, and the point's resolved configuration. A recorded row is
reused only when all three match the point as the study would train it now (:func:`mismatches`); the
dataset's path and the run folder are left out of the comparison (they differ between machines and are
covered by the hash and the point's id).
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)

UNKNOWN = "unknown"
MACHINE_KEYS = (("run", "run_dir"), ("data", "path"))  # where, not what: left out of the comparison
NOT_CODE = (":(exclude)docs",)  # changes there (the regenerated studies.md and its rows) train nothing


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode(errors="replace")


def code_state(root: Path) -> dict:
    """``{"commit", "dirty", "diff_sha256"}`` of the repository at ``root`` (tracked files outside ``docs/``);
    commit ``unknown`` outside git."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        logger.warning("%s is not a git checkout (or git is missing): rows record commit %r.", root, UNKNOWN)
        return {"commit": UNKNOWN, "dirty": False, "diff_sha256": ""}
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE) or ""
    dirty = bool(status.strip())
    diff = _git(root, "diff", "HEAD", "--binary", "--", ".", *NOT_CODE) or ""
    diff = hashlib.sha256(diff.encode()).hexdigest() if dirty else ""
    return {"commit": commit.strip(), "dirty": dirty, "diff_sha256": diff}


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def comparable_config(config: dict) -> dict:
    """The configuration without the keys that say where, not what (:data:`MACHINE_KEYS`)."""
    out = {section: dict(values) for section, values in config.items()}
    for section, key in MACHINE_KEYS:
        out.get(section, {}).pop(key, None)
    return out


def mismatches(row: dict, expected: dict) -> list[str]:
    """What differs between a recorded ``row`` and the ``expected`` provenance of its point (empty: reusable).
    ``expected``: ``code`` (:func:`code_state`), ``data_sha256``, ``config``."""
    if "commit" not in row or "data_sha256" not in row or "config" not in row:
        return ["no provenance recorded"]
    out = []
    code = expected["code"]
    if row["commit"] != code["commit"] or code["commit"] == UNKNOWN:
        out.append(f"commit {row['commit'][:12]} (now {code['commit'][:12]})")
    elif (row.get("dirty"), row.get("diff_sha256", "")) != (code["dirty"], code["diff_sha256"]):
        out.append("uncommitted changes differ")
    if row["data_sha256"] != expected["data_sha256"]:
        out.append(f"data sha256 {row['data_sha256'][:12]} (now {expected['data_sha256'][:12]})")
    mine, now = comparable_config(row["config"]), comparable_config(expected["config"])
    if mine != now:
        keys = sorted(f"{s}.{k}" for s in set(mine) | set(now)
                      for k in set(mine.get(s, {})) | set(now.get(s, {}))
                      if mine.get(s, {}).get(k) != now.get(s, {}).get(k))
        out.append("config " + ", ".join(keys[:6]) + (" ..." if len(keys) > 6 else ""))
    return out


__all__ = ["code_state", "comparable_config", "file_sha256", "mismatches"]
