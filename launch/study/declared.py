"""Were a study's claims declared before its rows? Checked in the study file's git history.

A study's **declaration** is what its verdicts rest on: its ``claims`` (bounds, primary, margins,
planned effects) and its tie rules (``ties``, of the study and of each arm). The commit that declares
it is the oldest commit of the study file, walking back from HEAD, whose declaration equals today's
(:func:`declaration_commit`). Every row records the commit it trained at; the declaration precedes a row
when its commit is that row's commit or an ancestor of it (``git merge-base --is-ancestor``). A row
trained before it, or a declaration with uncommitted changes, is flagged: its verdicts are post hoc.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from launch.study.meta import portable


def _git(root: Path, *args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None


def declaration(text: str, name: str) -> str:
    """The declaration of study ``name`` in a study file's ``text``, as canonical JSON ("" where absent)."""
    try:
        raw = (yaml.safe_load(text) or {}).get(name)
    except yaml.YAMLError:
        return ""
    if not isinstance(raw, dict):
        return ""
    arms = {k: (v or {}).get("ties") for k, v in (raw.get("arms") or {}).items() if (v or {}).get("ties")}
    return json.dumps({"claims": raw.get("claims"), "ties": raw.get("ties"), "arm_ties": arms}, sort_keys=True)


@dataclass(frozen=True)
class DeclarationCheck:
    commit: str  # the commit that declares the study's claims; "" when none
    date: str = ""
    uncommitted: bool = False  # the file's declaration differs from HEAD's
    before: tuple[str, ...] = field(default_factory=tuple)  # ids of rows trained before the declaration
    unknown: tuple[str, ...] = field(default_factory=tuple)  # ids of rows whose commit is not in the history
    why: str = ""  # why the history could not be read

    @property
    def ok(self) -> bool:
        return bool(self.commit) and not (self.uncommitted or self.before or self.unknown or self.why)


def declaration_commit(path: Path, name: str) -> tuple[str, str, bool, str]:
    """(commit, date, uncommitted, why) of study ``name`` in the study file ``path``."""
    path = Path(path).resolve()
    root_out = _git(path.parent, "rev-parse", "--show-toplevel")
    if root_out is None or root_out.returncode:
        return "", "", False, f"{path} is not in a git checkout"
    root = Path(root_out.stdout.decode().strip())
    rel = path.relative_to(root).as_posix()
    now = declaration(path.read_text(), name)
    log = _git(root, "log", "--follow", "--format=%H %cI", "--name-only", "--", rel)
    entries, lines = [], [x for x in (log.stdout.decode().splitlines() if log and not log.returncode else []) if x]
    for header, name_line in zip(lines[::2], lines[1::2]):
        commit, date = header.split(" ", 1)
        entries.append((commit, date, name_line))
    if not entries:
        return "", "", False, f"{rel} has no commit"
    head = _git(root, "show", f"{entries[0][0]}:{entries[0][2]}")
    uncommitted = head is None or head.returncode != 0 or declaration(head.stdout.decode(), name) != now
    found = ("", "")
    for commit, date, at in entries:
        shown = _git(root, "show", f"{commit}:{at}")
        if shown is None or shown.returncode or declaration(shown.stdout.decode(errors="replace"), name) != now:
            break
        found = (commit, date)
    return found[0], found[1], uncommitted, ""


def check_rows(path: Path, name: str, rows: list[dict]) -> DeclarationCheck:
    """Whether the declaration of study ``name`` in ``path`` precedes every finished row's commit."""
    commit, date, uncommitted, why = declaration_commit(path, name)
    if why or not commit:
        return DeclarationCheck("", why=why or "the declaration in force is not committed")
    root = Path(path).resolve().parent
    before, unknown = [], []
    for row in rows:
        if row.get("status") != "ok":
            continue
        done = _git(root, "merge-base", "--is-ancestor", commit, str(row.get("commit", "")))
        if done is None or done.returncode not in (0, 1):
            unknown.append(row["id"])
        elif done.returncode == 1:
            before.append(row["id"])
    return DeclarationCheck(commit, date, uncommitted, tuple(sorted(before)), tuple(sorted(unknown)))


def declaration_lines(study, rows: list[dict]) -> list[str]:
    """The report's line on whether the claims were declared (committed) before every row was trained."""
    if not study.claims or not study.source:
        return []
    check = check_rows(Path(study.source), study.name, rows)
    where = f"`{portable(str(study.source))}`"
    if check.why:
        return [f"- Declaration: **not checked** ({check.why}): read the verdicts as post hoc."]
    head = f"- Declaration: the claims and tie rules as judged here were committed to {where} at `{check.commit[:12]}` " \
           f"({check.date})"
    ok = [r for r in rows if r.get("status") == "ok"]
    if check.ok:
        return [head + f"; all {len(ok)} finished rows trained at that commit or after it: declared before the rows."]
    issues = []
    if check.uncommitted:
        issues.append("the study file has uncommitted changes to them")
    if check.before:
        issues.append(f"{len(check.before)} of {len(ok)} rows trained before it (the study file was edited after "
                      "its rows)")
    if check.unknown:
        issues.append(f"{len(check.unknown)} rows name a commit not in this history")
    return [head + "; **flagged**: " + "; ".join(issues) + ". Read the verdicts as post hoc until the study runs "
            "again under this declaration."]


__all__ = ["DeclarationCheck", "check_rows", "declaration", "declaration_commit", "declaration_lines"]
