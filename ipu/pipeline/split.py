"""Splitting a replica into pipeline stages, and what each stage stashes between its passes.

Stages are contiguous runs of named blocks (``stem``, ``block1a`` ... ``block7b``, ``head``), one
stage per IPU. ``pipeline_splits`` name the first block of each new stage, as in Graphcore's
configs (``pipeline_splits: [block4a]`` gives stage 0 = stem..block3*, stage 1 = block4a..head).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ipu.pipeline.schedule import OpSchedule, build_schedule, recomputes
from models.profile import LayerProfile


@dataclass(frozen=True)
class StageSplit:
    """Which blocks, and so which layers, run on each stage."""

    blocks: tuple[tuple[str, ...], ...]  # blocks[stage], in execution order
    layer_stage: tuple[int, ...]  # stage of each profile layer, in profile order

    @property
    def num_stages(self) -> int:
        return len(self.blocks)

    @property
    def splits(self) -> tuple[str, ...]:
        """The first block of every stage after the first (the ``pipeline_splits`` spelling)."""
        return tuple(stage[0] for stage in self.blocks[1:])

    def layers(self, profile: Sequence[LayerProfile], stage: int) -> list[LayerProfile]:
        return [layer for layer, s in zip(profile, self.layer_stage) if s == stage]


def block_order(profile: Sequence[LayerProfile]) -> list[str]:
    """The model's block names in execution order (each block's layers must be contiguous)."""
    order: list[str] = []
    for layer in profile:
        if not order or order[-1] != layer.block:
            if layer.block in order:
                raise ValueError(f"block {layer.block!r} is not contiguous in the profile (layer {layer.name})")
            order.append(layer.block)
    return order


def split_at(profile: Sequence[LayerProfile], splits: Sequence[str]) -> StageSplit:
    """Stages that start at the named blocks (``[]`` gives a single stage)."""
    order = block_order(profile)
    index = {name: i for i, name in enumerate(order)}
    unknown = [name for name in splits if name not in index]
    if unknown:
        raise ValueError(
            f"pipeline split {unknown[0]!r} is not a block of this model: choose from {', '.join(order[1:])}"
        )
    cuts = [index[name] for name in splits]
    if cuts != sorted(set(cuts)) or (cuts and cuts[0] == 0):
        raise ValueError(
            f"pipeline splits {list(splits)} must be distinct, in model order and after {order[0]!r}"
        )
    return _split_from_cuts(profile, order, cuts)


def split_balanced(profile: Sequence[LayerProfile], num_stages: int, by: str = "flops") -> StageSplit:
    """Contiguous stages minimising the largest stage's FLOPs (``by="flops"``) or memory (``"memory"``)."""
    order = block_order(profile)
    if not 1 <= num_stages <= len(order):
        raise ValueError(f"cannot split {len(order)} blocks into {num_stages} stages")
    weights = _block_weights(profile, order, by)
    cuts = _min_max_partition(weights, num_stages)
    return _split_from_cuts(profile, order, cuts)


def check_pipeline_splits(splits: Sequence[str], num_stages: int, field: str = "pipeline_splits") -> None:
    """Splits name the first block of each later stage: an N-stage replica (N IPUs unless a device
    mapping puts several stages on one) needs N - 1 of them (none means "balance automatically"
    where the caller allows it)."""
    if splits and len(splits) != num_stages - 1:
        raise ValueError(f"{field} has {len(splits)} splits ({len(splits) + 1} stages) but the replica has "
                         f"{num_stages} stages (IPUs per replica): give {num_stages - 1} block names")


def check_gradient_accumulation(gradient_accumulation: int, num_stages: int,
                                names: tuple[str, str] = ("--gradient-accumulation", "--ipus-per-replica")) -> None:
    """A pipeline needs every stage busy in the main phase: GA >= 2 x stages (docs/sources.md §7).

    ``names``: how the caller's user spells the accumulation count and the stage count, for the fix.
    """
    if num_stages > 1 and gradient_accumulation < 2 * num_stages:
        raise ValueError(
            f"gradient accumulation {gradient_accumulation} is too small for a {num_stages}-stage "
            f"pipeline: it must be at least 2 x stages = {2 * num_stages}; raise "
            f"{names[0]} to {2 * num_stages} or more, or use fewer {names[1]}"
        )


def stashed_elems(
    profile: Sequence[LayerProfile], split: StageSplit, schedule: OpSchedule, input_elems: int,
    recompute_until: str = "",
) -> list[dict[str, int]]:
    """Activation elements each stage keeps alive at its peak, by tensor name.

    Without recomputation a stage stashes every layer's saved elements (``ipu_saved_elems``) for each micro-batch in
    flight. With it (``schedule.recompute``) a stage stashes only its input per micro-batch in
    flight, and holds one micro-batch's saved activations while it recomputes and backpropagates
    (the last stage does not recompute: its backward follows its forward). A single-stage
    replica with recomputation keeps each block's input as a checkpoint and recomputes one block
    at a time, so it holds the checkpoints plus the largest block's activations; from
    ``recompute_until`` on (a block name) it keeps every activation instead, as its last checkpoint
    segment is not recomputed. ``input_elems`` is the size of stage 0's input (the image micro-batch).
    """
    out = []
    for s in range(split.num_stages):
        layers = split.layers(profile, s)
        in_flight = schedule.max_in_flight(s)
        stage_input = input_elems if s == 0 else split.layers(profile, s - 1)[-1].activation_elems
        if recomputes(s, split.num_stages, schedule.recompute) and split.num_stages == 1:
            kept = first_layer_of(layers, recompute_until) if recompute_until else None
            kept = len(layers) if kept is None else kept
            tensors = _block_checkpoints(layers[:kept], stage_input) if kept else {}
            if kept < len(layers):
                tail_input = layers[kept - 1].activation_elems if kept else stage_input
                tensors.update(_saved_by_block(layers[kept:], 1, " (kept)", tail_input))
        elif recomputes(s, split.num_stages, schedule.recompute):
            tensors = {f"stage input x{in_flight}": in_flight * stage_input}
            tensors.update(_saved_by_block(layers, 1, " (recomputed)", stage_input))
        else:
            tensors = _saved_by_block(layers, in_flight, f" x{in_flight}", stage_input)
        out.append(tensors)
    return out


def first_layer_of(layers: Sequence[LayerProfile], name: str) -> int | None:
    """Index of the first layer of block or module ``name``: a layer whose block is ``name``, or whose
    name has it as a path component (an ONNX node ``/layer3/layer3.4/conv1/Conv`` is in ``layer3.4``)."""
    for i, layer in enumerate(layers):
        if layer.block == name or name in layer.name.split("/"):
            return i
    return None


def ipu_saved_elems(layers: Sequence[LayerProfile], input_elems: int) -> list[int]:
    """What each layer keeps for backward on an IPU.

    A CPU convolution may cache an im2col expansion (k x k copies of its input); Poplar's
    convolutions keep the input itself, so a conv's saved elements are capped at its input size
    (the previous layer's output; ``input_elems`` for the first layer).
    """
    out = []
    previous = input_elems
    for layer in layers:
        saved = layer.saved_elems
        if layer.kind in ("conv", "dwconv") and previous:
            saved = min(saved, previous)
        out.append(saved)
        previous = layer.activation_elems
    return out


def _block_checkpoints(layers: Sequence[LayerProfile], input_elems: int) -> dict[str, int]:
    saved = _saved_by_block(layers, 1, " (recomputed)", input_elems)
    largest = max(saved, key=saved.__getitem__)
    tensors = {largest: saved[largest]}
    previous = input_elems
    for layer in layers:
        key = f"checkpoint {layer.block}"
        if key not in tensors:
            tensors[key] = previous
        previous = layer.activation_elems
    return tensors


def _saved_by_block(layers: Sequence[LayerProfile], copies: int, suffix: str, input_elems: int) -> dict[str, int]:
    by_block: dict[str, int] = {}
    for layer, saved in zip(layers, ipu_saved_elems(layers, input_elems)):
        key = f"activations {layer.block}{suffix}"
        by_block[key] = by_block.get(key, 0) + copies * saved
    return by_block


def _split_from_cuts(profile: Sequence[LayerProfile], order: list[str], cuts: Sequence[int]) -> StageSplit:
    bounds = [0, *cuts, len(order)]
    blocks = tuple(tuple(order[a:b]) for a, b in zip(bounds, bounds[1:]))
    stage_of = {name: s for s, stage in enumerate(blocks) for name in stage}
    return StageSplit(blocks, tuple(stage_of[layer.block] for layer in profile))


def _block_weights(profile: Sequence[LayerProfile], order: list[str], by: str) -> list[float]:
    if by not in ("flops", "memory"):
        raise ValueError(f"balance by 'flops' or 'memory', not {by!r}")
    weight = dict.fromkeys(order, 0.0)
    for layer in profile:
        if by == "flops":
            weight[layer.block] += layer.flops_fwd + layer.flops_bwd
        else:
            weight[layer.block] += layer.params + layer.saved_elems
    return [weight[name] for name in order]


def _min_max_partition(weights: Sequence[float], parts: int) -> list[int]:
    """Cut points splitting ``weights`` into ``parts`` contiguous runs with the smallest maximum sum."""
    n = len(weights)
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(parts + 1)]  # best[k][i]: first i blocks in k parts
    cut = [[0] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    cuts, i = [], n
    for k in range(parts, 0, -1):
        i = cut[k][i]
        cuts.append(i)
    return sorted(cuts)[1:]  # drop the leading 0


def split_stages(profile: Sequence[LayerProfile], num_stages: int, splits: Sequence[str] = ()) -> StageSplit:
    """The named ``splits`` if given, else ``num_stages`` stages balanced by FLOPs."""
    if splits:
        split = split_at(profile, splits)
        if split.num_stages != num_stages:
            raise ValueError(f"{len(splits)} pipeline splits make {split.num_stages} stages, not {num_stages}")
        return split
    return split_balanced(profile, num_stages, by="flops")


def replica_schedule(kind: str, num_stages: int, gradient_accumulation: int, recompute: bool,
                     device_mapping: Sequence[int] = ()) -> OpSchedule:
    """The schedule one replica runs per weight update; a single stage runs sequentially."""
    if num_stages == 1:
        return build_schedule("sequential", 1, gradient_accumulation, recompute, device_mapping)
    return build_schedule(kind, num_stages, gradient_accumulation, recompute, device_mapping)
