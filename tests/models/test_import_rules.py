"""The import direction below ``ipu/``: ``models/``, ``data/`` and ``jit/`` never import the
launcher, the device model or MPI; ``data/`` never imports ``models/``; the kernels
(``models/kernels/``) import no layer; ``jit/`` imports none of the project's packages. Every
module of each package is read, subpackages included, and imports inside functions count too.
(Named apart from ``tests/ipu/test_layering.py``: test modules share one namespace.)"""

import pytest

from tests.import_rules import PROJECT, ROOT, calls_of, import_cycles, offenders
from tests.import_rules import under as _under


@pytest.mark.parametrize("package", ["models", "data", "jit"])
def test_engine_packages_import_no_launcher_device_model_or_mpi(package):
    assert offenders(package, lambda m: _under(m, "mpi4py", "launch", "ipu")) == {}


def test_data_does_not_import_models():
    assert offenders("data", lambda m: _under(m, "models")) == {}


def test_kernels_import_no_layer():
    assert offenders("models/kernels", lambda m: _under(m, "models") and not _under(m, "models.kernels")) == {}


def test_onnx_importer_imports_no_kernels():
    """models.onnx (shared by prediction and training) reads layers and profiles, never kernels' internals."""
    assert offenders("models/onnx", lambda m: _under(m, "models.kernels")) == {}


@pytest.mark.parametrize("package", ["poprun_py", "ipu", "models", "data", "launch", "jit"])
def test_only_models_onnx_imports_onnx(package):
    """Reading, profiling, training and writing an ONNX graph is ``models/onnx/``'s: the rest takes its ``Graph``."""
    found = offenders(package, lambda m: _under(m, "onnx"))
    assert {f: m for f, m in found.items() if not f.startswith("models/onnx/")} == {}


@pytest.mark.parametrize("package", ["poprun_py", "ipu", "models", "data", "launch", "jit"])
def test_only_models_onnx_reads_an_onnx_file(package):
    """Outside ``models/onnx/`` a file is read through ``models.onnx.OnnxFile`` (once per process), never with the
    readers it wraps."""
    found = {str(p.relative_to(ROOT)): [r for r in ("load_graph", "read_model", "onnx_profile") if calls_of(p, r)]
             for p in (ROOT / package).rglob("*.py") if not p.is_relative_to(ROOT / "models" / "onnx")}
    assert {f: r for f, r in found.items() if r} == {}


@pytest.mark.parametrize("package", ["poprun_py", "ipu", "models", "data", "launch", "jit"])
def test_no_import_circle(package):
    """Within a package the imports form no circle, deferred imports inside functions included
    (``models.onnx``: the graph's IR is ``ir.py``, which the fusions and the reader both import)."""
    assert import_cycles(package) == []


def test_the_circle_check_sees_a_deferred_circle(tmp_path):
    package = tmp_path / "models" / "onnx"
    package.mkdir(parents=True)
    (package / "graph.py").write_text("def load():\n    from models.onnx.fuse import fuse\n")
    (package / "fuse.py").write_text("from models.onnx.graph import Node\n")
    assert import_cycles("models/onnx", tmp_path) == [["models.onnx.fuse", "models.onnx.graph"]]


def test_jit_imports_none_of_the_project():
    assert offenders("jit", lambda m: _under(m, *[p for p in PROJECT if p != "jit"])) == {}


def test_the_rules_see_a_violation(tmp_path):
    """The checker finds an import of a layer from inside a function, and a relative one."""
    kernels = tmp_path / "models" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "bad.py").write_text("def f():\n    from models.conv import Conv2d\n\nfrom .. import norm\n")
    found = offenders("models/kernels", lambda m: _under(m, "models") and not _under(m, "models.kernels"), tmp_path)
    assert found == {"models/kernels/bad.py": ["models", "models.conv", "models.conv.Conv2d", "models.norm"]}
