"""The import direction below ``ipu/``: ``models/``, ``data/`` and ``jit/`` never import the
launcher, the device model or MPI; ``data/`` never imports ``models/``; the kernels
(``models/kernels/``) import no layer; ``jit/`` imports none of the project's packages. Every
module of each package is read, subpackages included, and imports inside functions count too.
(Named apart from ``tests/ipu/test_layering.py``: test modules share one namespace.)"""

import pytest

from tests.import_rules import PROJECT, offenders
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


def test_jit_imports_none_of_the_project():
    assert offenders("jit", lambda m: _under(m, *[p for p in PROJECT if p != "jit"])) == {}


def test_the_rules_see_a_violation(tmp_path):
    """The checker finds an import of a layer from inside a function, and a relative one."""
    kernels = tmp_path / "models" / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "bad.py").write_text("def f():\n    from models.conv import Conv2d\n\nfrom .. import norm\n")
    found = offenders("models/kernels", lambda m: _under(m, "models") and not _under(m, "models.kernels"), tmp_path)
    assert found == {"models/kernels/bad.py": ["models", "models.conv", "models.conv.Conv2d", "models.norm"]}
