"""Fully connected layer ``y = x @ W.T + b`` with torch's ``[out, in]`` weight layout."""

from __future__ import annotations

import math

import numpy as np

from models.kernels import gemm as _gemm
from models.layer import Layer, Shape
from models.param import Param
from models.profile import ConvShape


class Dense(Layer):
    """Dense (torch ``nn.Linear``). Keeps its input ``[N, in]`` for the weight gradient.

    Initialised like torch/torchvision: weight and bias uniform in +-1/sqrt(init_fan)
    (``init_fan`` defaults to the input size; torchvision's EfficientNet classifier uses the
    output size and a zero bias).
    """

    kind = "dense"

    def __init__(self, name: str, block: str, cin: int, cout: int, bias: bool = True, dtype=np.float32,
                 rng: np.random.Generator | None = None, init_fan: int | None = None,
                 zero_bias: bool = False) -> None:
        super().__init__(name, block, dtype)
        self.cin, self.cout = cin, cout
        rng = rng or np.random.default_rng(0)
        bound = 1.0 / math.sqrt(init_fan or cin)
        self.weight = Param(self._key("weight"), rng.uniform(-bound, bound, (cout, cin)).astype(self.dtype))
        self.bias = None
        if bias:
            b = np.zeros(cout) if zero_bias else rng.uniform(-bound, bound, cout)
            self.bias = Param(self._key("bias"), b.astype(self.dtype), "bias")
        self.need_dx = True

    def params(self):
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def out_shape(self, shape: Shape) -> Shape:
        return shape[0], self.cout

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        if x.ndim != 2 or x.shape[1] != self.cin:
            raise ValueError(f"dense {self.name}: expected input [N, {self.cin}], got {x.shape}")
        self.x = x
        y = self._buf("y", (x.shape[0], self.cout))
        _gemm.matmul(x, self.weight.data.T, y)
        if self.bias is not None:
            y += self.bias.data
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray | None:
        partials = self._temp("gemm_partials", _gemm.scratch_shape(self.cout, self.cin))
        _gemm.matmul_tn(dy, self.x, self.weight.grad, partials)
        if self.bias is not None:
            self.bias.grad[...] = dy.sum(axis=0, dtype=np.float64)
        if not self.need_dx:
            return None
        dx = self._grad_buf(self.x.shape)
        _gemm.matmul(dy, self.weight.data, dx)
        return dx

    def profile(self, shape: Shape):
        macs = shape[0] * self.cin * self.cout
        geometry = ConvShape(shape[0], (1, 1), self.cin, self.cout)
        return [self._record(shape, 2 * macs, 4 * macs, shape[0] * self.cin, matmul=True, conv=geometry)]
