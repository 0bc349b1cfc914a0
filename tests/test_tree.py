"""The tests tree: shared helpers live in helper modules, never in a test module, and the tests of
``launch/`` and ``ipu/`` mirror their subpackages (one folder each)."""

from tests.import_rules import ROOT, imported_modules

TESTS = ROOT / "tests"


def test_no_test_module_imports_another_test_module():
    found = {}
    for path in TESTS.rglob("*.py"):
        bad = sorted(m for m in imported_modules(path) if m.startswith("tests.")
                     and any(part.startswith("test_") for part in m.split(".")))
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert found == {}, "move what they share into a helper module (a name without test_)"


def test_the_tests_of_launch_mirror_its_commands():
    commands = {p.parent.name for p in (ROOT / "launch").glob("*/__init__.py")} - {"examples"}
    assert commands and all((TESTS / "launch" / c / "__init__.py").is_file() for c in commands), commands


def test_the_tests_of_ipu_mirror_its_subpackages():
    subpackages = {p.parent.name for p in (ROOT / "ipu").glob("*/__init__.py")}
    assert subpackages and all((TESTS / "ipu" / s / "__init__.py").is_file() for s in subpackages), subpackages
