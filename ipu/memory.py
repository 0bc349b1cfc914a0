"""Compile-time memory fit: place a replica's tensors on each IPU's tiles and check every tile.

For each IPU (pipeline stage) the model places, from the stage's ``LayerProfile`` records:

* always-live tensors, each spread over as many tiles as its size needs (at least
  ``TENSOR_GRAIN_BYTES`` per tile) starting where the previous one ended: weights, optimizer state,
  gradient accumulators and stashed activations (as the schedule keeps them, see
  ``pipeline.stashed_elems``);
* temporaries, spread evenly over all compute tiles: the largest convolution/matmul workspace
  (capped by ``available_memory_proportion`` of tile memory, as Poplar's planner is) plus the
  activation gradients in flight during backward;
* code and exchange overhead, per tile and per layer.

A tile fits when its bytes do not exceed ``memory_per_tile``. When one does not, ``check_fit``
raises ``IpuOutOfMemoryError`` in Poplar's words before any step runs (docs/sources.md §5). All
constants below are modelling assumptions, not Graphcore figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ipu.io_tiles import IoTilePlan, plan_io_tiles
from ipu.pipeline.split import StageSplit, replica_schedule, split_stages, stashed_elems
from ipu.plan import OPTIMIZER_STATE_SLOTS, IpuPlan
from ipu.precision import get_precision
from ipu.specs import KIB, IpuSpec, get_chip
from models.profile import LayerProfile

TENSOR_GRAIN_BYTES = 4 * KIB  # assumed: a tensor is spread over ceil(bytes / grain) tiles at most
CODE_BYTES_PER_TILE = 32 * KIB  # assumed: control program, runtime and vertex state base per tile
CODE_BYTES_PER_LAYER_PER_TILE = 192  # assumed: ~8 compute sets (fwd + bwd) x ~24 B of vertex state and control code
EXCHANGE_BYTES_PER_LAYER_PER_TILE = 128  # assumed: ~8 exchanges (fwd + bwd) x ~16 B of exchange code per tile
CONV_WORKSPACE_FACTOR = 2.0  # assumed: a conv/matmul plan wants 2 x (input + output) as workspace
CATEGORIES = ("weights", "optimizer", "accumulators", "stash", "temporaries", "code", "exchange")
CONSUMERS_SHOWN = 5


class IpuOutOfMemoryError(ValueError):
    """The program does not fit: raised at compile time, before any step runs."""


@dataclass(frozen=True, eq=False)
class IpuMemory:
    """Where one IPU's bytes go."""

    ipu: int
    blocks: tuple[str, ...]
    by_category: dict[str, int]
    consumers: tuple[tuple[str, int], ...]  # (tensor, bytes), largest first
    tile_bytes: np.ndarray = field(repr=False)  # bytes on each compute tile
    memory_per_tile: int = 0
    num_io_tiles: int = 0

    @property
    def total_bytes(self) -> int:
        return int(sum(self.by_category.values()))

    @property
    def worst_tile(self) -> int:
        """Index of the fullest tile (IO tiles come first, so compute tile i is tile io + i)."""
        return self.num_io_tiles + int(np.argmax(self.tile_bytes))

    @property
    def peak_tile_bytes(self) -> int:
        return int(self.tile_bytes.max())

    @property
    def tiles_over(self) -> int:
        return int((self.tile_bytes > self.memory_per_tile).sum())

    @property
    def bytes_over(self) -> int:
        return int(np.clip(self.tile_bytes - self.memory_per_tile, 0, None).sum())

    @property
    def fits(self) -> bool:
        return self.tiles_over == 0


@dataclass(frozen=True)
class MemoryPlan:
    """The fit of one replica, IPU by IPU, plus its IO tiles."""

    ipus: tuple[IpuMemory, ...]
    io: IoTilePlan
    split: StageSplit

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.ipus)


def fit(plan: IpuPlan, profile: Sequence[LayerProfile]) -> MemoryPlan:
    """Place ``plan``'s replica (``profile`` at ``plan.micro_batch``) on its IPUs; never raises OOM."""
    spec = get_chip(plan.chip)
    split = split_stages(profile, plan.num_stages, plan.pipeline_splits)
    schedule = replica_schedule(plan.schedule, split.num_stages, plan.gradient_accumulation, plan.recompute,
                                plan.device_mapping)
    image_elems = plan.image_elems
    io = plan_io_tiles(
        spec, plan.num_io_tiles, image_elems * (1 if plan.eight_bit_io else 4), plan.prefetch_micro_batches,
        plan.ipus_per_replica, plan.schedule,
    )
    stashes = stashed_elems(profile, split, schedule, input_elems=image_elems, recompute_until=plan.recompute_until)
    ipus = []
    for ipu in range(schedule.num_ipus):  # the stages mapped to an IPU share its tiles
        stages = [s for s in range(split.num_stages) if schedule.ipu_of(s) == ipu]
        if not stages:
            continue
        layers = [layer for s in stages for layer in split.layers(profile, s)]
        stash = {name: elems for s in stages for name, elems in stashes[s].items()}
        blocks = tuple(block for s in stages for block in split.blocks[s])
        ipus.append(_place_stage(plan, spec, layers, stash, blocks, ipu, io.compute_tiles))
    return MemoryPlan(tuple(ipus), io, split)


def check_fit(plan: IpuPlan, profile: Sequence[LayerProfile]) -> MemoryPlan:
    """``fit``, raising ``IpuOutOfMemoryError`` naming the first IPU that does not fit."""
    memory = fit(plan, profile)
    raise_if_out_of_memory(memory, plan)
    return memory


def raise_if_out_of_memory(memory: MemoryPlan, plan: IpuPlan) -> None:
    """Raise ``IpuOutOfMemoryError`` for the first IPU of ``memory`` (a ``fit`` result) that does not fit."""
    for ipu in memory.ipus:
        if not ipu.fits:
            raise IpuOutOfMemoryError(out_of_memory_message(ipu, plan))


def out_of_memory_message(ipu: IpuMemory, plan: IpuPlan) -> str:
    """Poplar's wording, plus how much is over, the largest consumers and what to change."""
    consumers = ", ".join(f"{name} {format_bytes(b)}" for name, b in ipu.consumers[:CONSUMERS_SHOWN])
    return (
        f"Out of memory on tile {ipu.worst_tile} of IPU {ipu.ipu}: {format_bytes(ipu.peak_tile_bytes)} required, "
        f"{format_bytes(ipu.memory_per_tile)} available "
        f"({format_bytes(ipu.peak_tile_bytes - ipu.memory_per_tile)} over; "
        f"{ipu.tiles_over} of {len(ipu.tile_bytes)} compute tiles over by {format_bytes(ipu.bytes_over)} in total). "
        f"poplar::graph_memory_allocation_error: Cannot fit all variable data onto one or more tiles. "
        f"Largest consumers on IPU {ipu.ipu}: {consumers}. To fit, try: {'; '.join(_remedies(plan))}"
    )


def _remedies(plan: IpuPlan) -> list[str]:
    fixes = []
    if not plan.recompute:
        fixes.append("enable recomputation (recompute=True)")
    if plan.micro_batch > 1:
        fixes.append(f"a smaller micro-batch (now {plan.micro_batch})")
    fixes.append(f"more IPUs per replica / pipeline stages (now {plan.ipus_per_replica})")
    if plan.available_memory_proportion > 0.1:
        fixes.append(f"a lower available_memory_proportion (now {plan.available_memory_proportion})")
    if plan.precision != "16.16":
        fixes.append(f"precision 16.16 (now {plan.precision})")
    if plan.num_io_tiles:
        fixes.append(f"fewer IO tiles (now {plan.num_io_tiles})")
    if plan.ipus_per_replica > 1 and plan.schedule == "grouped":
        fixes.append("the interleaved schedule (stashes fewer micro-batches)")
    return fixes


def _place_stage(
    plan: IpuPlan, spec: IpuSpec, layers: list[LayerProfile], stash: dict[str, int],
    blocks: tuple[str, ...], ipu: int, compute_tiles: int,
) -> IpuMemory:
    mode = get_precision(plan.precision)
    tensors = _live_tensors(plan, layers, stash)
    tiles = np.zeros(compute_tiles, dtype=np.float64)
    cursor = 0
    for _, _, nbytes in sorted(tensors, key=lambda t: -t[2]):
        cursor = _spread(tiles, nbytes, cursor)
    category = {c: 0 for c in CATEGORIES}
    for cat, _, nbytes in tensors:
        category[cat] += nbytes
    temp = _temporaries(plan, layers, mode.activation_bytes, spec.memory_per_tile * compute_tiles)
    code = compute_tiles * (CODE_BYTES_PER_TILE + CODE_BYTES_PER_LAYER_PER_TILE * len(layers))
    exchange = compute_tiles * EXCHANGE_BYTES_PER_LAYER_PER_TILE * len(layers)
    category.update(temporaries=temp, code=code, exchange=exchange)
    tiles += (temp + code + exchange) / compute_tiles
    named = [(name, nbytes) for _, name, nbytes in tensors] + [("temporaries (peak layer)", temp)]
    consumers = tuple(sorted(named, key=lambda t: -t[1]))
    return IpuMemory(ipu, blocks, category, consumers, np.ceil(tiles), spec.memory_per_tile, plan.num_io_tiles)


def _live_tensors(plan: IpuPlan, layers: list[LayerProfile], stash: dict[str, int]) -> list[tuple[str, str, int]]:
    """(category, name, bytes) of everything alive for the whole step on this IPU."""
    mode = get_precision(plan.precision)
    slots = OPTIMIZER_STATE_SLOTS[plan.optimizer]
    params: dict[str, int] = {}
    for layer in layers:
        params[layer.block] = params.get(layer.block, 0) + layer.params
    out = []
    for block, count in params.items():
        if count == 0:
            continue
        out.append(("weights", f"weights {block}", count * mode.weight_bytes))
        if slots:
            out.append(("optimizer", f"optimizer state {block}", slots * count * mode.optimizer_bytes))
        if plan.gradient_accumulation > 1:
            out.append(("accumulators", f"gradient accumulators {block}", count * mode.accumulator_bytes))
    out += [("stash", f"stashed {name}", elems * mode.activation_bytes) for name, elems in stash.items() if elems]
    return out


def _temporaries(plan: IpuPlan, layers: list[LayerProfile], act_bytes: int, ipu_bytes: int) -> int:
    """Peak per-layer temporaries: the conv workspace (AMP-capped) plus activation gradients."""
    cap = plan.available_memory_proportion * ipu_bytes
    peak = 0.0
    previous = plan.image_elems
    for layer in layers:
        io_bytes = (previous + layer.activation_elems) * act_bytes
        workspace = min(cap, CONV_WORKSPACE_FACTOR * io_bytes) if layer.matmul else 0.0
        peak = max(peak, workspace + io_bytes)  # dy in and dx out during backward
        previous = layer.activation_elems
    return int(peak)


def _spread(tiles: np.ndarray, nbytes: int, cursor: int) -> int:
    """Add ``nbytes`` evenly over the next tiles from ``cursor`` (wrapping); return the new cursor."""
    count = len(tiles)
    n = int(min(count, max(1, -(-nbytes // TENSOR_GRAIN_BYTES))))
    share = nbytes / n
    end = cursor + n
    tiles[cursor:min(end, count)] += share
    if end > count:
        tiles[: end - count] += share
    return end % count


def format_bytes(nbytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} B"
