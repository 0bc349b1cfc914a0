"""``model.onnx`` and ``poprun-ipu --onnx FILE`` read the file once per process (``models.onnx.OnnxFile``),
however many graphs, profiles and exports are made of it: counted at ``onnx.load``, the one reader
(``models.onnx.graph.read_model``), in a training run (its own process, as the console script runs it) and in
a sweep of ``poprun-ipu predict`` over two image sizes and two micro-batches."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.launch.train.train_runs import ROOT, env

torch = pytest.importorskip("torch")
from tests.launch.train.onnx_nets import export_tiny  # noqa: E402  (torch first)

# runs poprun-train's main in this process, with onnx.load counted; prints the count last
COUNTED_TRAIN = """
import sys, onnx
reads = []
load = onnx.load
onnx.load = lambda *a, **k: reads.append(a[0]) or load(*a, **k)
from launch.train.cli import main
code = main(sys.argv[1:])
print("READS", len(reads), code)
"""


def test_a_training_run_reads_its_onnx_file_once(tmp_path):
    path = export_tiny(tmp_path / "tiny.onnx")
    run_dir = tmp_path / "run"
    args = ["--config", "dense", "--set", f"model.onnx={path}", "--set", "run.max_steps=2", "--set", "run.evaluate=false",
            "--set", "run.plots=false", "--set", "run.progress_bar=false", "--set", f"run.run_dir={run_dir}"]
    proc = subprocess.run([sys.executable, "-c", COUNTED_TRAIN, *args], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "READS 1 0", proc.stdout[-2000:]
    assert (run_dir / "model.onnx").is_file()  # the export at the end did not read the file again


def test_a_prediction_sweep_reads_its_onnx_file_once(tmp_path, monkeypatch, capsys):
    import onnx

    from launch.predict.cli import main

    path = export_tiny(tmp_path / "tiny.onnx")
    reads = []
    load = onnx.load
    monkeypatch.setattr(onnx, "load", lambda *a, **k: reads.append(a[0]) or load(*a, **k))
    code = main(["predict", "--onnx", path, "--image-size", "28,32", "--micro-batch", "2,4", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows["rows"]) == 4
    assert reads == [str(tmp_path / "tiny.onnx")]
