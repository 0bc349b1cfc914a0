"""A fully connected classifier for MNIST-style images, for the batch-size studies.

Layout matches a torch module with attributes ``fc1 .. fcK`` (``nn.Linear``, ReLU between):
keys ``fc1.weight``, ``fc1.bias``, ... Blocks are named ``fc1`` .. ``fcK``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.activation import Activation
from models.dense import Dense
from models.layer import Layer, Sequential, Shape


@dataclass(frozen=True)
class DenseNetConfig:
    hidden: tuple[int, ...] = (256, 256)
    num_classes: int = 10
    resolution: int = 28
    in_channels: int = 1

    def __post_init__(self) -> None:
        if any(h < 1 for h in self.hidden) or self.num_classes < 1:
            raise ValueError(f"dense net: hidden sizes and num_classes must be >= 1, got {self.hidden}, "
                             f"{self.num_classes}")


class Flatten(Layer):
    """[N, H, W, C] -> [N, H*W*C] (a view). Keeps the input shape."""

    kind = "act"

    def out_shape(self, shape: Shape) -> Shape:
        return shape[0], int(np.prod(shape[1:]))

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        self.x_shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy.reshape(self.x_shape)


def build_dense_net(cfg: DenseNetConfig, dtype=np.float32, seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = [cfg.resolution * cfg.resolution * cfg.in_channels, *cfg.hidden, cfg.num_classes]
    blocks = []
    for i in range(len(sizes) - 1):
        name = f"fc{i + 1}"
        layers: list[Layer] = [Flatten("", name, dtype)] if i == 0 else []
        layers.append(Dense(name, name, sizes[i], sizes[i + 1], True, dtype, rng))
        if i < len(sizes) - 2:
            layers.append(Activation("", name, "relu", dtype))
        blocks.append((name, Sequential(name, name, layers, dtype)))
    return blocks
