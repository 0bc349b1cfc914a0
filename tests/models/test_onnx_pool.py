"""Windowed AveragePool, MaxPool in ceil mode and dilated Conv train from ONNX as torch computes them (float64
logits and every gradient within 1e-10); an average pool over the whole image stays the engine's global pool."""

from __future__ import annotations

import onnx
import pytest

from models.onnx import load_graph
from models.onnx.network import graph_model
from models.pool import AvgPool2d, GlobalAvgPool, MaxPool2d
from tests.models.onnx_exports import training_export
from tests.models.onnx_parity import assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn


class Windows(nn.Module):
    """DenseNet's transition (2x2/2), Inception's 3x3/1 pool counting the padding, a 3x3/2 pool in ceil mode without
    it, a max pool in ceil mode (8 -> 4 rows) and a dilated convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.dilated = nn.Conv2d(4, 4, 3, padding=2, dilation=2, bias=False)
        self.transition = nn.AvgPool2d(2, 2)
        self.inception = nn.AvgPool2d(3, 1, 1)
        self.ceil = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
        self.max = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.max(self.dilated(torch.relu(self.conv(x))))  # 16 -> 8 (ceil mode: 7.5 -> 8)
        x = self.ceil(self.inception(self.transition(x)) + self.transition(x))  # 8 -> 4 -> 3 (ceil mode: 2.5 -> 3)
        return self.fc(x.mean((2, 3)))


def test_pooling_windows_and_a_dilated_conv_train_as_torchs_in_float64():
    torch.manual_seed(0)
    model = assert_step_equals_torch(Windows(), (2, 2, 16, 16))
    layers = [op.layer for op in graph_ops(model) if op.layer is not None]
    assert sum(isinstance(layer, AvgPool2d) for layer in layers) == 3  # the exporter reads the transition once
    assert any(isinstance(layer, MaxPool2d) and layer.ceil_mode for layer in layers)


class WholeImage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.pool = nn.AvgPool2d(6)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).flatten(1))


def test_an_average_pool_over_the_whole_image_is_the_global_pool():
    torch.manual_seed(0)
    graph = load_graph(onnx.load_from_string(training_export(WholeImage(), torch.randn(2, 1, 8, 8))), batch_size=2)
    layers = [op.layer for op in graph_ops(graph_model(graph)) if op.layer is not None]
    assert any(isinstance(layer, GlobalAvgPool) for layer in layers)
    assert not any(isinstance(layer, AvgPool2d) for layer in layers)
