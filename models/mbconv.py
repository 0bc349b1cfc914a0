"""The MBConv block (inverted residual with squeeze-and-excitation), torchvision layout.

``<prefix>.block.0`` 1x1 expand + norm + SiLU (absent when the expansion keeps the width),
then the k x k depthwise/grouped conv + norm + SiLU, SE, and the 1x1 project + norm (linear).
With stride 1 and equal widths the block adds its input back, after stochastic depth
(drop-connect) of the residual branch. Keeps: the per-sample drop-connect factors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.conv_norm import NormSpec, conv_norm  # noqa: F401 (NormSpec re-exported)
from models.layer import ConsumesGradient, Layer, Rng, Sequential, Shape
from models.pool import drop_path_scale
from models.se import SqueezeExcitation


@dataclass(frozen=True)
class BlockSpec:
    """One MBConv block after width/depth scaling: everything needed to build or count it."""

    name: str          # block4a
    prefix: str        # features.4.0
    cin: int
    cout: int
    expanded: int
    kernel: int
    stride: int
    groups: int        # of the k x k conv: expanded for depthwise, efficientnet.group_count for G16
    squeeze: int
    drop_prob: float

    @property
    def residual(self) -> bool:
        return self.stride == 1 and self.cin == self.cout


class MBConv(ConsumesGradient, Layer):
    kind = "add"

    def __init__(self, spec: BlockSpec, norm: NormSpec, padding, rng_holder: Rng, dtype=np.float32,
                 rng: np.random.Generator | None = None) -> None:
        super().__init__(spec.prefix, spec.name, dtype)
        self.spec, self.rng = spec, rng_holder
        p, b, layers = f"{spec.prefix}.block", spec.name, []
        if spec.expanded != spec.cin:
            layers.append(conv_norm(f"{p}.{len(layers)}", b, spec.cin, spec.expanded, 1, 1, 1, norm, "silu",
                                    padding, dtype, rng))
        layers.append(conv_norm(f"{p}.{len(layers)}", b, spec.expanded, spec.expanded, spec.kernel, spec.stride,
                                spec.groups, norm, "silu", padding, dtype, rng))
        layers.append(SqueezeExcitation(f"{p}.{len(layers)}", b, spec.expanded, spec.squeeze, dtype, rng))
        layers.append(conv_norm(f"{p}.{len(layers)}", b, spec.expanded, spec.cout, 1, 1, 1, norm, None,
                                padding, dtype, rng))
        self.body = Sequential(p, b, layers, dtype)

    def children(self):
        return [self.body]

    def params(self):
        return self.body.params()

    def buffers(self):
        return self.body.buffers()

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        y = self.body.forward(x, training)
        if not self.spec.residual:
            return y
        # y is the project norm's own output buffer, which it does not need again: update in place.
        self.scale = None
        if training and self.spec.drop_prob > 0:
            self.scale = drop_path_scale(self.rng, x.shape[0], self.spec.drop_prob, self.dtype)
            y *= self.scale[:, None, None, None]
        y += x
        return y

    def _backward(self, dy: np.ndarray, consume: bool) -> np.ndarray:
        if not self.spec.residual:
            return self.body.backward_consuming(dy) if consume else self.body.backward(dy)
        if self.scale is None:  # the residual add needs dy afterwards: the body must not overwrite it
            dx = self.body.backward(dy)
        else:  # the scaled branch is ours alone
            branch = self._buf("dbranch", dy.shape)
            np.multiply(dy, self.scale[:, None, None, None], out=branch)
            dx = self.body.backward_consuming(branch)
        dx += dy
        return dx

    def out_shape(self, shape: Shape) -> Shape:
        return self.body.out_shape(shape)

    def profile(self, shape: Shape):
        out = self.body.profile(shape)
        if self.spec.residual:
            e = int(np.prod(shape))
            out.append(self._record(shape, 2 * e, e, shape[0], own_params=False))
        return out
