"""Per-layer cost records that the models expose to the IPU memory and cost models.

A model's ``profile(batch_size)`` returns one ``LayerProfile`` per layer, in execution order.
``ipu/`` turns these into cycles, bytes per tile and pipeline stages; ``models/`` only counts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConvShape:
    """The geometry of a convolution or matrix product: what a device planner partitions.

    A dense layer is a 1x1 convolution over a 1x1 field. ``in_channels`` and ``out_channels``
    count all groups; ``groups`` divides both. The output field is ``ceil(in / stride)`` (the
    "same" padding the models use; a valid-padded layer states ``out_hw`` explicitly).
    """

    batch: int
    in_hw: tuple[int, int]
    in_channels: int
    out_channels: int
    kernel: tuple[int, int] = (1, 1)
    stride: int = 1
    groups: int = 1
    out_hw: tuple[int, int] | None = None

    @property
    def out_size(self) -> tuple[int, int]:
        if self.out_hw is not None:
            return self.out_hw
        return (-(-self.in_hw[0] // self.stride), -(-self.in_hw[1] // self.stride))

    @property
    def macs(self) -> int:
        ho, wo = self.out_size
        return (self.batch * ho * wo * self.out_channels * self.kernel[0] * self.kernel[1]
                * (self.in_channels // self.groups))


@dataclass(frozen=True)
class LayerProfile:
    """What one layer costs for a given batch size (counts, not times).

    name: the layer's parameter prefix, as in the state_dict (``features.1.0.block.0``).
    block: the named block it belongs to (``stem``, ``block1a``, ..., ``block7b``, ``head``),
        the unit at which a model can be split into pipeline stages.
    kind: ``conv`` (regular or grouped), ``dwconv`` (depthwise), ``dense``, ``norm``,
        ``act``, ``se``, ``pool``, ``dropout``, ``loss``, ``add``.
    flops_fwd: floating-point operations of the forward pass (a multiply-add counts 2).
    flops_bwd: of the backward pass (input and parameter gradients).
    params: number of trainable parameters.
    activation_elems: elements of the layer's output for the whole batch.
    saved_elems: elements the layer keeps for backward for the whole batch.
    matmul: True when the work maps onto the IPU's accumulating matrix units
        (convolutions and matrix products); False for vector work.
    in_shape: the layer's input shape, batch first (NHWC for images); empty when unknown.
    conv: the convolution / matrix-product geometry of a ``matmul`` layer; None otherwise
        or when unknown (the device cost model then falls back to FLOP rates).
    """

    name: str
    block: str
    kind: str
    flops_fwd: int
    flops_bwd: int
    params: int
    activation_elems: int
    saved_elems: int
    matmul: bool
    in_shape: tuple[int, ...] = ()
    conv: ConvShape | None = None
