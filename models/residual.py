"""ResNet's residual blocks in torchvision's layout: ``relu(body(x) + shortcut(x))``.

Bottleneck (ResNet-50/101/152, v1.5): ``conv1`` 1x1 -> ``bn1`` + ReLU -> ``conv2`` 3x3 with the
block's stride -> ``bn2`` + ReLU -> ``conv3`` 1x1 to 4x the width -> ``bn3``. Basic (ResNet-18/34):
``conv1`` 3x3 with the stride -> ``bn1`` + ReLU -> ``conv2`` 3x3 -> ``bn2``. The shortcut is the
input itself, or ``downsample.0`` (1x1 conv with the stride) + ``downsample.1`` (norm) when the
stride or the width changes. The ReLUs after ``bn1``/``bn2`` are fused into the norms.

Keeps: the block output (the ReLU's backward reads its sign). That array is also the next
layer's input, which that layer keeps (a 3x3 conv: expands into columns it keeps) and counts in
its profile, so the block's ReLU row reports no saved elements of its own (the last block's
output, read only by the head's pool, is the one array this leaves uncounted). Where the downsample conv keeps the very array that
``conv1`` keeps (a stride-1 1x1 shortcut), its row reports none either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from jit import prange
from models.kernels.threads import compiled_kernel
from models.conv import Conv2d
from models.conv_norm import NormSpec, conv_norm
from models.layer import Layer, Sequential, Shape, release_consumed

EXPANSION = {True: 4, False: 1}  # output width / block width, bottleneck or basic


@compiled_kernel(parallel=True)
def add_relu(y, s):
    """y = max(y + s, 0) in place, on flat arrays."""
    for i in prange(y.size):
        v = y[i] + s[i]
        y[i] = v if v > 0 else 0.0


@compiled_kernel(parallel=True)
def relu_backward(y, dy, dz):
    """dz = dy where the ReLU's output y is positive, else 0 (flat arrays)."""
    for i in prange(y.size):
        dz[i] = dy[i] if y[i] > 0 else 0.0


@dataclass(frozen=True)
class ResidualSpec:
    """One residual block: everything needed to build or count it."""

    name: str          # layer2.0: the state_dict prefix and the block (pipeline split) name
    cin: int
    width: int         # of the 3x3 convs (torchvision's ``planes``)
    stride: int
    bottleneck: bool

    @property
    def cout(self) -> int:
        return self.width * EXPANSION[self.bottleneck]

    @property
    def downsample(self) -> bool:
        return self.stride != 1 or self.cin != self.cout

    def param_count(self) -> int:
        """Trainable parameters (a norm has a scale and an offset per channel)."""
        w, total = self.width, 0
        if self.bottleneck:
            total += self.cin * w + 2 * w + 9 * w * w + 2 * w + w * self.cout + 2 * self.cout
        else:
            total += 9 * self.cin * w + 2 * w + 9 * w * w + 2 * w
        if self.downsample:
            total += self.cin * self.cout + 2 * self.cout
        return total


def _body(spec: ResidualSpec, norm: NormSpec, dtype, rng) -> list[Layer]:
    p, b, w = spec.name, spec.name, spec.width
    if spec.bottleneck:
        shapes = [(spec.cin, w, 1, 1, "relu"), (w, w, 3, spec.stride, "relu"), (w, spec.cout, 1, 1, None)]
    else:
        shapes = [(spec.cin, w, 3, spec.stride, "relu"), (w, w, 3, 1, None)]
    layers: list[Layer] = []
    for i, (cin, cout, k, stride, act) in enumerate(shapes, start=1):
        layers.append(Conv2d(f"{p}.conv{i}", b, cin, cout, k, stride, "symmetric", 1, False, dtype, rng))
        layers.append(norm.build(f"{p}.bn{i}", b, cout, act, dtype))
    return layers


class ResidualBlock(Layer):
    kind = "add"

    def __init__(self, spec: ResidualSpec, norm: NormSpec, dtype=np.float32,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(spec.name, spec.name, dtype)
        self.spec = spec
        rng = rng or np.random.default_rng(0)
        self.body = Sequential(spec.name, spec.name, _body(spec, norm, self.dtype, rng), self.dtype)
        self.shortcut = None
        if spec.downsample:
            self.shortcut = conv_norm(f"{spec.name}.downsample", spec.name, spec.cin, spec.cout, 1, spec.stride, 1,
                                      norm, None, 0, self.dtype, rng)

    def children(self) -> list[Layer]:
        return [self.body] + ([self.shortcut] if self.shortcut is not None else [])

    def params(self):
        return [p for child in self.children() for p in child.params()]

    def buffers(self):
        out = {}
        for child in self.children():
            out.update(child.buffers())
        return out

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        # y is the last norm's own output buffer (no fused activation, so its backward never reads it).
        y = self.body.forward(x, training)
        s = x if self.shortcut is None else self.shortcut.forward(x, training)
        add_relu(y.reshape(-1), np.ascontiguousarray(s).reshape(-1))
        self.y = y
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dz = self._grad_buf(dy.shape) if self.grad_pool is not None else self._buf("dz", dy.shape)
        relu_backward(self.y.reshape(-1), np.ascontiguousarray(dy).reshape(-1), dz.reshape(-1))
        dx = self.body.backward(dz)
        if self.shortcut is None:
            dx += dz
        else:
            ds = self.shortcut.backward(dz)
            dx += ds
            release_consumed(self.grad_pool, ds, dx)
        release_consumed(self.grad_pool, dz, dx)
        return dx

    def out_shape(self, shape: Shape) -> Shape:
        return self.body.out_shape(shape)

    def profile(self, shape: Shape):
        rows = self.body.profile(shape)
        if self.shortcut is not None:
            short = self.shortcut.profile(shape)
            if self.shortcut.layers[0].path == self.body.layers[0].path == "pointwise":  # conv1's array
                short[0] = dataclasses.replace(short[0], saved_elems=0)
            rows += short
        e = int(np.prod(self.out_shape(shape)))
        rows.append(self._record(shape, e, e, 0, own_params=False))  # add (backward: sum of the two branches)
        rows.append(self._record(shape, e, e, 0, kind="act", own_params=False))  # ReLU (saved: see module doc)
        return rows
