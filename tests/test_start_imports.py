"""What a process imports at start, where it costs every instance of a job (docs/launcher.md, "What
launcher mode costs at start"): the per-instance agent stays off ``dataclasses`` (its records are
named tuples), ``psutil`` (until a tree is left to walk), ``tempfile``, ``logging``, ``socket`` and
``pathlib``, and a training process off ``onnx`` (0.8 s of CPU) until a run reads an ONNX file. Each in a fresh
interpreter: the test process has imported everything already."""

import json
import subprocess
import sys

import pytest


def imported(module: str, names: tuple[str, ...]) -> list[str]:
    code = (f"import sys, json, {module}; "
            f"print(json.dumps(sorted(n for n in {list(names)!r} if n in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module,names", [
    ("poprun_py.agent", ("dataclasses", "psutil", "tempfile", "logging", "socket", "pathlib", "numpy",
                         "poprun_py.config", "poprun_py.faults")),
    ("launch.train.cli", ("onnx", "ml_dtypes")),
    ("launch.predict.cli", ("onnx", "ml_dtypes")),
])
def test_a_start_path_leaves_out_what_it_does_not_use(module, names):
    assert imported(module, names) == []


def test_models_onnx_imports_the_onnx_package_when_a_file_is_read():
    code = ("import sys; import models.onnx as m; before = 'onnx' in sys.modules; "
            "m.graph.onnx.ModelProto; print(before, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
