"""IO tiles: how many of each IPU's tiles hold incoming batches instead of computing.

IO tiles (``num_io_tiles``) are taken away from compute and hold the prefetched input batches,
within 0.9 of their memory (the ``io_tile_available_memory_proportion`` default, docs/sources.md §6).
Host transfer then overlaps compute, but only for a single-IPU replica or the grouped pipeline
schedule (Graphcore's TensorFlow user guide, docs/sources.md §6). This is the device model's side; the runtime's infeed
(``ipu.runtime.streams``) is what fills them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ipu.specs import IpuSpec

logger = logging.getLogger(__name__)

IO_TILE_MEMORY_PROPORTION = 0.9  # docs/sources.md §6: io_tile_available_memory_proportion default
MIN_IO_TILES = 32  # docs/sources.md §6: Graphcore's CNN arg help, "Number of IO tiles. Minimum 32"


@dataclass(frozen=True)
class IoTilePlan:
    """How a replica's IPUs divide their tiles between compute and IO."""

    num_io_tiles: int
    compute_tiles: int
    io_budget_bytes: int  # bytes the IO tiles may hold
    io_bytes: int  # bytes they do hold: prefetch_micro_batches input batches
    overlap: bool  # whether host transfer overlaps compute


def io_overlaps(num_io_tiles: int, ipus_per_replica: int, schedule: str) -> bool:
    """The TF rule: overlap needs IO tiles and a single-IPU replica or the grouped schedule."""
    return num_io_tiles > 0 and (ipus_per_replica == 1 or schedule == "grouped")


def plan_io_tiles(
    spec: IpuSpec,
    num_io_tiles: int,
    batch_bytes: int,
    prefetch_micro_batches: int,
    ipus_per_replica: int,
    schedule: str,
) -> IoTilePlan:
    """Check that ``prefetch_micro_batches`` batches fit the IO tiles' budget and decide the overlap.

    Warns (log) when IO tiles are set but cannot overlap, as on the real system.
    """
    if not 0 <= num_io_tiles < spec.tiles:
        raise ValueError(f"num_io_tiles must be in [0, {spec.tiles}) for {spec.name}, got {num_io_tiles}")
    if 0 < num_io_tiles < MIN_IO_TILES:
        logger.warning("num_io_tiles=%d is below Graphcore's minimum of %d", num_io_tiles, MIN_IO_TILES)
    budget = int(num_io_tiles * spec.memory_per_tile * IO_TILE_MEMORY_PROPORTION)
    held = batch_bytes * prefetch_micro_batches if num_io_tiles else 0
    if held > budget:
        need = -(-held // int(spec.memory_per_tile * IO_TILE_MEMORY_PROPORTION))
        raise ValueError(
            f"Out of memory on IO tiles: {prefetch_micro_batches} prefetched batches of {batch_bytes} bytes "
            f"need {held} bytes but {num_io_tiles} IO tiles hold {budget}; use at least "
            f"num_io_tiles={need}, a smaller prefetch_micro_batches or 8-bit IO"
        )
    overlap = io_overlaps(num_io_tiles, ipus_per_replica, schedule)
    if num_io_tiles and not overlap:
        logger.warning(
            "num_io_tiles=%d will not overlap host IO with compute: that needs a single-IPU replica or "
            "the grouped pipeline schedule (this replica has %d IPUs, schedule %s)",
            num_io_tiles, ipus_per_replica, schedule,
        )
    return IoTilePlan(num_io_tiles, spec.tiles - num_io_tiles, budget, held, overlap)
