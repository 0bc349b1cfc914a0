"""The layers of ``launch``: the training command never depends on the studies built on it.

* ``launch/*.py`` (config, build, train, checkpoint, run_dir, report, ...) never imports
  ``launch/study/``: a study runs training points, training knows nothing of studies;
* ``launch/study/`` may import the training modules, and nothing imports it but ``launch.entry``;
* ``launch/examples/`` are programs for users: nothing in ``launch`` imports them;
* every subpackage of ``launch`` has a rule here.
"""

from pathlib import Path

from tests.import_rules import imported_modules

LAUNCH = Path(__file__).resolve().parents[2] / "launch"

# subpackage -> the modules outside it that may import it
IMPORTED_ONLY_BY = {"study": {"entry.py"}, "examples": set()}


def _imported_modules(path: Path) -> set[str]:
    return imported_modules(path, names=True)  # importlib.import_module("launch.study.cli") counts


def test_every_subpackage_has_a_rule():
    assert {p.parent.name for p in LAUNCH.glob("*/__init__.py")} == set(IMPORTED_ONLY_BY)


def test_each_subpackage_is_imported_only_from_where_its_rule_allows():
    for name, allowed in IMPORTED_ONLY_BY.items():
        prefix = f"launch.{name}"
        outside = [p for p in LAUNCH.rglob("*.py") if not p.relative_to(LAUNCH).parts[0] == name]
        offenders = {str(p.relative_to(LAUNCH)) for p in outside
                     if any(m == prefix or m.startswith(prefix + ".") for m in _imported_modules(p))}
        assert offenders <= allowed, (name, offenders - allowed)


def test_the_rule_sees_an_import_by_name():
    assert "launch.study.cli" in _imported_modules(LAUNCH / "entry.py")
