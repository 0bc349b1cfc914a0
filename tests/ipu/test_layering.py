"""The device model (``ipu/*.py``) never imports the training runtime (``ipu/runtime/``)."""

import ast
from pathlib import Path

IPU = Path(__file__).resolve().parents[2] / "ipu"


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_device_model_does_not_import_the_runtime():
    offenders = {
        path.name: sorted(m for m in _imported_modules(path) if m.startswith("ipu.runtime"))
        for path in IPU.glob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_runtime_package_exists_with_the_training_modules():
    names = {p.stem for p in (IPU / "runtime").glob("*.py")}
    assert {"engine", "replica", "pipelined_replica", "emulation", "streams", "normalise", "mixing"} <= names
