"""The claims' declaration precedes the rows: checked in a temporary git repository, where the study file
is committed, rows are trained at that commit, and then the claims are edited and committed again."""

from __future__ import annotations

import subprocess
from pathlib import Path

from launch.study.declared import check_rows, declaration, declaration_commit

STUDY = """\
s:
  base: dense
  seeds: [1, 2]
  claims:
    - {arm: a, reference: b, above: %s, primary: true}
  arms: {a: {lr: 0.1}, b: {lr: 0.1}}
"""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    return done.stdout.strip()


def _commit(root: Path, text: str, message: str) -> str:
    (root / "studies.yml").write_text(text)
    _git(root, "add", "studies.yml")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def _rows(commit: str) -> list[dict]:
    return [{"id": f"base/a/b8/lr0.1/s{s}", "status": "ok", "commit": commit} for s in (1, 2)]


def test_rows_after_the_declaration_pass_and_an_edit_after_them_is_flagged(tmp_path):
    _git(tmp_path, "init", "-q")
    declared = _commit(tmp_path, STUDY % "-1", "claims")
    later = _commit(tmp_path, STUDY % "-1" + "# a comment: the declaration is unchanged\n", "comment")
    path = tmp_path / "studies.yml"
    assert declaration_commit(path, "s")[:1] == (declared,)  # a commit that leaves the claims as they were is not it
    check = check_rows(path, "s", _rows(later))
    assert check.ok and check.commit == declared and not check.before

    edited = _commit(tmp_path, STUDY % "-2", "claims moved after the rows")  # the study file edited after its rows
    check = check_rows(path, "s", _rows(later))
    assert not check.ok and check.commit == edited and check.before == ("base/a/b8/lr0.1/s1", "base/a/b8/lr0.1/s2")
    assert check_rows(path, "s", _rows(edited)).ok  # rows trained under the new declaration

    path.write_text(STUDY % "-3")  # uncommitted: no declaration in force
    check = check_rows(path, "s", _rows(edited))
    assert not check.ok and "not committed" in check.why
    assert check_rows(path, "s", [{"id": "x", "status": "ok", "commit": "f" * 40}]).ok is False


def test_the_declaration_is_the_claims_and_tie_rules():
    assert declaration(STUDY % "-1", "s") != declaration(STUDY % "-2", "s")
    assert declaration(STUDY % "-1", "s") == declaration(STUDY % "-1" + "  title: another\n", "s")
    assert declaration("{}", "s") == ""


def test_outside_git_the_check_says_why(tmp_path):
    path = tmp_path / "studies.yml"
    path.write_text(STUDY % "-1")
    check = check_rows(path, "s", _rows("a" * 40))
    assert not check.ok and "not in a git checkout" in check.why
