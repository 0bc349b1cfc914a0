"""ONNX's LayerNormalization as a graph op, on the engine's group norm (no kernel of its own).

LayerNormalization normalises each sample over the axes from ``axis`` to the last, then scales and shifts
each of those K elements by its own weight and bias. Viewed as ``[M, 1, 1, K]`` (M the leading axes' size),
that is the engine's ``GroupNorm`` with one group of K channels per "image": the same statistics (float64
sums, biased variance), the same backward. Where the normalised axes are the last ones of the engine's
layout the view is free:

- a tensor of rank other than 4 (ViT's ``[N, tokens, D]``): ONNX's layout is the engine's;
- an image batch normalised from ``axis=1`` (C, H, W): the engine's NHWC rows; the weights are kept in
  (H, W, C) order and written back as (C, H, W);
- torch's channels-last layer norm (ConvNeXt's ``LayerNorm2d``: ``Transpose(0, 2, 3, 1)``, normalise the last
  axis, ``Transpose(0, 3, 1, 2)``), which ``fuse_ops.fuse_channels_last`` makes one op over the NHWC channels.

Any other axis of an image batch goes through ONNX's layout (a transposed copy each way).
"""

from __future__ import annotations

import numpy as np

from models.norm import GroupNorm
from models.onnx.ops import GraphOp, from_onnx, to_onnx
from models.param import Param


class LayerNorm(GraphOp):
    """Layer norm over the last ``k`` values of each row of the input's layout (``onnx_layout``: of ONNX's
    layout, transposed from and back to the engine's). ``learned``: whether the scale and the bias are
    parameters (a constant the graph computes, as torch's zero bias of ``LayerNorm(bias=False)``, stays
    fixed); ``axis``: the graph's first normalised axis (non-negative). Keeps what the group norm keeps and the
    input's shape."""

    def __init__(self, name, inputs, output, layer: GroupNorm, onnx_layout: bool, learned: tuple[bool, bool],
                 axis: int) -> None:
        super().__init__(name, inputs, output)
        self.layer, self.onnx_layout, self.learned, self.axis = layer, onnx_layout, learned, axis

    def params(self) -> list[Param]:
        return [p for p, learned in zip(self.layer.params(), self.learned) if learned]

    def _rows(self, a: np.ndarray) -> np.ndarray:
        a = to_onnx(a) if self.onnx_layout else a
        self.shape = a.shape
        return np.ascontiguousarray(a).reshape(-1, 1, 1, self.layer.channels)

    def _back(self, a: np.ndarray) -> np.ndarray:
        a = a.reshape(self.shape)
        return from_onnx(a) if self.onnx_layout else a

    def forward(self, xs, training):
        return self._back(self.layer.forward(self._rows(xs[0]), training))

    def backward(self, dy):
        return [self._back(self.layer.backward(self._rows(dy)))]
