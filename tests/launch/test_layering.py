"""The layers of ``launch``: one subpackage per command, each command's parser its own.

* ``launch/train/`` (``poprun-train``: configuration, build, the loop, checkpoints, run folders, the report)
  imports neither ``launch/predict/`` nor ``launch/study/``: both are built on training, training knows
  nothing of them;
* ``launch/predict/`` (``poprun-ipu``) and ``launch/study/`` (``poprun-study``) may import training, not each
  other, and nothing imports them but ``launch.entry`` (by name);
* ``launch/examples/`` are programs for users: nothing in ``launch`` imports them;
* every subpackage of ``launch`` has a rule here;
* each console script of ``pyproject.toml`` reaches exactly one ``ArgumentParser``.
"""

import tomllib
from pathlib import Path

import pytest

from tests.import_rules import ROOT, calls_of, entry_modules, imported_modules, reachable

LAUNCH = ROOT / "launch"
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]

# subpackage -> the modules outside it that may import it
IMPORTED_ONLY_BY = {
    "train": {"entry.py", "predict", "study"},
    "predict": {"entry.py"},
    "study": {"entry.py"},
    "examples": set(),
}


def _imported_modules(path: Path) -> set[str]:
    return imported_modules(path, names=True)  # importlib.import_module("launch.study.cli") counts


def test_every_subpackage_has_a_rule():
    assert {p.parent.name for p in LAUNCH.glob("*/__init__.py")} == set(IMPORTED_ONLY_BY)


def test_each_subpackage_is_imported_only_from_where_its_rule_allows():
    for name, allowed in IMPORTED_ONLY_BY.items():
        prefix = f"launch.{name}"
        outside = [p for p in LAUNCH.rglob("*.py") if not p.relative_to(LAUNCH).parts[0] == name]
        offenders = {p.relative_to(LAUNCH).parts[0] for p in outside
                     if any(m == prefix or m.startswith(prefix + ".") for m in _imported_modules(p))}
        assert offenders <= allowed, (name, offenders - allowed)


def test_training_reaches_neither_prediction_nor_studies():
    """Not even through another package: everything ``launch.train`` can run stays out of both."""
    reached = reachable({f"launch.train.{p.stem}" for p in (LAUNCH / "train").glob("*.py")})
    assert not {str(p.relative_to(ROOT)) for p in reached if p.is_relative_to(LAUNCH / "predict")
                or p.is_relative_to(LAUNCH / "study")}


def test_the_rule_sees_an_import_by_name():
    assert "launch.study.cli" in _imported_modules(LAUNCH / "entry.py")


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_console_script_has_one_argument_parser(script):
    parsers = {str(p.relative_to(ROOT)): n for p in reachable(entry_modules(SCRIPTS[script]))
               if (n := calls_of(p, "ArgumentParser"))}
    assert sum(parsers.values()) == 1, (script, parsers)


def test_the_parser_rule_sees_every_module_a_script_runs():
    assert entry_modules(SCRIPTS["poprun-ipu"]) == {"launch.predict.cli"}
    reached = {str(p.relative_to(ROOT)) for p in reachable({"launch.predict.cli"})}
    assert {"launch/predict/cli.py", "launch/train/config.py", "ipu/cli.py"} <= reached
