"""poprun-ipu check --onnx FILE: every blocker of small torch exports, for prediction and for training, one line
each, with the export that fixes it; exit 0 when both are clean, else 2."""

from __future__ import annotations

import io
import warnings

import pytest

from launch.predict import cli
from tests.models.onnx_exports import training_export
from tests.models.torch_tiny_nets import TwoConvs

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.torch


class Small(nn.Module):
    """Conv, batch norm, ReLU, a pooling ``pool`` and a classifier; ``act``: the activation after the norm."""

    def __init__(self, pool=None, act=None) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
        self.act = act or nn.ReLU()
        self.pool = pool or nn.MaxPool2d(2)
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(self.pool(self.act(self.bn(self.conv(x)))).mean((2, 3)))


def write(tmp_path, name, model, opset=17, eval_mode=False, channels=3):
    torch.manual_seed(0)
    x = torch.randn(2, channels, 16, 16)
    if eval_mode:  # torch's default export: batch norm folded into the convolution
        f = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), (x,), f, dynamo=False, opset_version=opset)
        data = f.getvalue()
    else:
        data = training_export(model, x, input_name="x", dynamic={0: "batch", 2: "h", 3: "w"}, opset=opset)
    (tmp_path / name).write_bytes(data)
    return name


def check(tmp_path, monkeypatch, capsys, *args):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", "--onnx", *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_a_clean_graph_exits_0(tmp_path, monkeypatch, capsys):
    name = write(tmp_path, "clean.onnx", Small())
    code, lines, err = check(tmp_path, monkeypatch, capsys, name, "--image-size", "32")
    assert code == 0 and err == ""
    assert lines == ["clean.onnx: input 2x3x32x32", "predict: ok", "train: ok"]


def test_a_dynamic_image_size_is_checked_at_224_with_a_note(tmp_path, monkeypatch, capsys):
    code, lines, _ = check(tmp_path, monkeypatch, capsys, write(tmp_path, "clean.onnx", Small()))
    assert code == 0 and lines[0] == "clean.onnx: input 2x3x224x224"
    assert lines[1].startswith("note: the graph's image size is dynamic: checked at 224x224")


def test_what_only_prediction_takes_is_a_training_blocker_with_its_fix(tmp_path, monkeypatch, capsys):
    """A dilated max pool predicts and does not train; a ceil-mode pool whose last window starts in the padding
    is named with the export that fixes it."""
    name = write(tmp_path, "pools.onnx", Small(nn.Sequential(nn.MaxPool2d(2, 2, padding=1, ceil_mode=True),
                                                             nn.MaxPool2d(3, 1, 1, dilation=2))))
    code, lines, err = check(tmp_path, monkeypatch, capsys, name, "--image-size", "15")
    assert code == 2 and "pools.onnx cannot train as it is" in err and err.count("\n") == 1
    assert lines[:3] == ["pools.onnx: input 2x3x15x15", "predict: ok", "train: 2 blockers"]
    assert lines[3].startswith("  MaxPool at node '/pool/pool.0/MaxPool': the graph says the output is [2, 4, 9, 9], "
                               "torch's pooling gives [2, 4, 8, 8]; fix: ") and "ceil_mode=False" in lines[3]
    assert lines[4] == "  MaxPool at node '/pool/pool.1/MaxPool': dilations [2, 2]: pooling windows without dilation only"
    assert len(lines) == 5


def test_an_eval_mode_export_is_told_to_export_in_training_mode(tmp_path, monkeypatch, capsys):
    """Folded in eval mode, the two equal biases of ``TwoConvs`` are stored once."""
    code, lines, _ = check(tmp_path, monkeypatch, capsys, write(tmp_path, "eval.onnx", TwoConvs(), eval_mode=True,
                                                          channels=1))
    assert code == 2 and lines[0] == "eval.onnx: input 2x1x16x16"
    assert lines[1].startswith("note: the graph has no normalisation layer")
    assert lines[2:4] == ["predict: ok", "train: 1 blocker"] and len(lines) == 5
    assert "is read by more than one layer (shared weights do not train); fix: this looks like an eval-mode export" \
        in lines[4]
    assert "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False" in lines[4]


def test_an_op_nothing_reads_blocks_both_with_the_opset_fix(tmp_path, monkeypatch, capsys):
    """Exact GELU below opset 20 is Div, Erf, Add, Mul: Erf stops prediction and training, with opset_version=20;
    at opset 20 the same network is clean."""
    name = write(tmp_path, "gelu17.onnx", Small(act=nn.GELU()))
    code, lines, err = check(tmp_path, monkeypatch, capsys, name, "--image-size", "16")
    assert code == 2 and "gelu17.onnx cannot predict or train as it is" in err
    erf = ("  Erf at node '/act/Erf' (inputs ['/act/Div_output_0']): not an op of the op table "
           "(models/onnx/op_table.py); fix: torch writes exact GELU as Div, Erf, Add, Mul below opset 20: export "
           "with opset_version=20 or later to write it as one Gelu node")
    assert lines == ["gelu17.onnx: input (not imported)", "predict: 1 blocker", erf,
                     "train: 1 blocker (the importer's; the trainer is checked once the graph imports)", erf]
    code, lines, _ = check(tmp_path, monkeypatch, capsys, write(tmp_path, "gelu20.onnx", Small(act=nn.GELU()), 20),
                           "--image-size", "16")
    assert code == 0 and lines[1:] == ["predict: ok", "train: ok"]


def test_pipeline_splits_are_checked_for_both(tmp_path, monkeypatch, capsys):
    name = write(tmp_path, "clean.onnx", Small())
    code, lines, _ = check(tmp_path, monkeypatch, capsys, name, "--image-size", "16", "--pipeline-splits", "pool")
    assert code == 0 and lines[1:] == ["predict: ok", "train: ok"]
    code, lines, _ = check(tmp_path, monkeypatch, capsys, name, "--image-size", "16", "--pipeline-splits", "nope")
    assert code == 2 and lines[1] == "predict: 1 blocker" and lines[3] == "train: 1 blocker"
    assert lines[2] == ("  --pipeline-splits nope: 'nope' names no block, node or module path of clean.onnx; name "
                        "blocks (conv, bn, act, pool, ReduceMean, fc), nodes or module paths, in graph order")
    assert lines[4] == lines[2].replace("--pipeline-splits", "ipu.pipeline_splits")


def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken.onnx").write_bytes(b"not a graph")
    for args, words in ((["broken.onnx"], "not a readable ONNX model"), (["none.onnx"], "no such file"),
                        (["none.onnx", "--image-size", "0"], "--image-size 0: give a positive number")):
        code, lines, err = check(tmp_path, monkeypatch, capsys, *args)
        assert code == 2 and lines == [] and words in err and err.count("\n") == 1, err
