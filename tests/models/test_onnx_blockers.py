"""Every blocker of a graph in one error: the importer names each op it cannot read and the trainer each node it
cannot train (op, count, first nodes, and the export that fixes it where one does), instead of stopping at the
first; an eval-mode export's shared weights are said to be the eval-mode export."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest

from models.onnx import OnnxImportError, UnsupportedOpError, load_graph
from models.onnx.network import graph_model
from tests.models.onnx_exports import training_export
from tests.models.torch_tiny_nets import TwoConvs

torch = pytest.importorskip("torch")
nn = torch.nn


class Blocked(nn.Module):
    """Two exact GELUs, a max pool in ceil mode whose last window starts in the padding (torch drops it, onnx's
    shape inference keeps it), a dilated conv, a dilated max pool, a 2x2/2 average pool (ResNet-D's shortcut) and
    a layer norm over every axis, the batch's included."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act1, self.act2 = nn.GELU(), nn.GELU()
        self.pool = nn.MaxPool2d(2, 2, padding=1, ceil_mode=True)
        self.dilated = nn.Conv2d(4, 4, 3, padding=2, dilation=2)
        self.dilated_pool = nn.MaxPool2d(3, 1, 1, dilation=2)
        self.avg = nn.AvgPool2d(2, 2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.pool(self.act1(self.bn(self.conv(x))))
        x = self.avg(self.dilated_pool(self.act2(self.dilated(x))))
        x = nn.functional.layer_norm(x, x.shape)
        return self.fc(x.mean((2, 3)))


def test_the_importer_names_every_unsupported_op_at_once_with_the_opset_fix_for_erf():
    """Below opset 20 torch writes exact GELU as Div, Erf, Add, Mul: both Erf nodes are named in one line with
    the export that writes Gelu, next to a second unsupported op (a TopK spliced in)."""
    torch.manual_seed(0)
    model = onnx.load_from_string(training_export(Blocked(), torch.randn(2, 1, 15, 15), opset=17))
    erfs = [n.name for n in model.graph.node if n.op_type == "Erf"]
    assert len(erfs) == 2
    # an op nothing reads, after the classifier
    k = onnx.numpy_helper.from_array(np.array([3], np.int64), "k")
    model.graph.initializer.append(k)
    out = model.graph.output[0].name
    model.graph.node.append(onnx.helper.make_node("TopK", [out, "k"], ["top", "idx"], name="topk"))
    model.graph.output[0].name = "top"
    with pytest.raises(UnsupportedOpError) as e:
        load_graph(model, batch_size=2)
    msg = str(e.value)
    assert "\n" not in msg and "unsupported ONNX ops, 2 blockers:" in msg
    assert f"[1] Erf at 2 nodes ({erfs[0]!r}, {erfs[1]!r}): not an op of the op table (models/onnx/op_table.py); fix: " in msg
    assert "opset_version=20" in msg
    assert "[2] TopK at node 'topk'" in msg


def test_training_names_every_node_it_cannot_train_at_once_with_each_fix():
    """At opset 20 the graph imports (Gelu is one node, which trains) and training refuses, in one line, the ceil-mode
    max pool whose size onnx and torch disagree on (with its fix), the dilated max pool and the layer norm over the
    batch; the dilated conv and the windowed average pool train."""
    torch.manual_seed(0)
    graph = load_graph(onnx.load_from_string(training_export(Blocked(), torch.randn(2, 1, 15, 15), opset=20)), batch_size=2)
    ops = [n.op for n in graph.nodes]
    assert ops.count("Gelu") == 2 and "Erf" not in ops
    with pytest.raises(OnnxImportError) as e:
        graph_model(graph, shown="blocked.onnx")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("blocked.onnx: cannot train 3 blockers: [1] ") and "Gelu at" not in msg
    assert ("MaxPool at node '/pool/MaxPool': the graph says the output is [2, 4, 9, 9], torch's pooling gives "
            "[2, 4, 8, 8]; fix: onnx's shape inference counts a last window") in msg and "ceil_mode=False" in msg
    assert "MaxPool at node '/dilated_pool/MaxPool': dilations [2, 2]: pooling windows without dilation only" in msg
    assert "LayerNormalization at node " in msg and "it mixes the batch's axis 0" in msg
    assert "Conv at" not in msg and "AveragePool at" not in msg
    assert "the trainable graph model supports Conv" in msg


def test_an_eval_mode_export_is_told_to_export_in_training_mode():
    """torch's default export (eval mode, constant folding) folds batch norm into the convolutions and stores equal
    folded biases once: training names the eval-mode export and the training-mode export that fixes it."""
    torch.manual_seed(0)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TwoConvs().eval(), (torch.randn(2, 1, 8, 8),), f, dynamo=False, opset_version=17)
    graph = load_graph(onnx.load_from_string(f.getvalue()), batch_size=2)
    assert not [n for n in graph.nodes if n.op == "BatchNormalization"]
    with pytest.raises(OnnxImportError) as e:
        graph_model(graph, shown="eval.onnx")
    msg = str(e.value)
    assert "shared weights do not train" in msg and "eval-mode export" in msg
    assert "torch.onnx.TrainingMode.TRAINING" in msg and "do_constant_folding=False" in msg
