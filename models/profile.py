"""Per-layer cost records that the models expose to the IPU memory and cost models.

A model's ``profile(batch_size)`` returns one ``LayerProfile`` per layer, in execution order.
``ipu/`` turns these into cycles, bytes per tile and pipeline stages; ``models/`` only counts.
"""

from __future__ import annotations

from dataclasses import dataclass


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
