"""A small CNN exported from torch in training mode, the ``model.onnx`` of the training tests: conv + BN +
ReLU, a residual block, global pool, Gemm; 28x28x1 images (the dense config's dataset) -> 10 classes."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tests.models.onnx_exports import training_export


class TinyNet(nn.Module):
    """conv+BN+ReLU, a residual block, global pool, Gemm: 28x28x1 -> 10 classes."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8))
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.body(x))
        return self.fc(x.mean(dim=(2, 3)))


def export_tiny(path, classes: int = 10) -> str:
    torch.manual_seed(0)
    net = TinyNet(classes).train()
    Path(path).write_bytes(training_export(net, torch.randn(2, 1, 28, 28), input_name="images",
                                           output_name="logits", dynamic={0: "batch"}))
    return str(path)
