"""Compiling a plan for the simulated IPUs: what Poplar's compile is to a real run.

:func:`compile_device` turns an ``IpuPlan`` and its model's per-layer profile into the compiled
device: the memory fit on each IPU's tiles with the IO tiles (``ipu.memory.fit``), the memory report
(logged, and plotted as a PNG when asked), and ``IpuOutOfMemoryError`` in Poplar's words when a
tile does not fit. ``launch`` (a training run's config) and ``ipu.runtime.program`` (the pipelining
API) both compile through it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ipu.io_tiles import IoTilePlan
from ipu.memory import CATEGORIES, IpuOutOfMemoryError, MemoryPlan, fit, format_bytes, raise_if_out_of_memory
from ipu.plan import IpuPlan
from models.profile import LayerProfile

logger = logging.getLogger(__name__)

COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3")


@dataclass(frozen=True)
class CompiledIpu:
    """What the compile step decided: the plan (None when no IPU-POD can run the configuration), its memory
    fit (None when the fit is not checked), the IO tiles, and the layer profile the plan was placed with
    (empty when the fit is not checked)."""

    plan: IpuPlan | None
    memory: MemoryPlan | None
    io: IoTilePlan
    profile: tuple[LayerProfile, ...] = ()


def compile_device(plan: IpuPlan, profile: Sequence[LayerProfile], *, fields: str = "",
                   plot_path: str | Path | None = None) -> CompiledIpu:
    """Place ``plan`` on its IPUs' tiles (``ipu.memory.fit``), log the memory report (and plot it to
    ``plot_path``), and raise ``IpuOutOfMemoryError`` in Poplar's words when a tile does not fit,
    followed by ``fields`` (what the caller can change) when given."""
    memory = fit(plan, profile)
    logger.info("Memory per IPU (%s, %s on %s, micro-batch %d, precision %s):\n%s", plan.model, plan.chip,
                plan.system, plan.micro_batch, plan.precision, format_memory_report(memory))
    if plot_path is not None:
        logger.info("Memory plot: %s", plot_memory_report(memory, plot_path))
    try:
        raise_if_out_of_memory(memory, plan)
    except IpuOutOfMemoryError as err:
        if not fields:
            raise
        raise IpuOutOfMemoryError(f"{err}. {fields}") from None
    return CompiledIpu(plan, memory, memory.io, tuple(profile))


def format_memory_report(memory: MemoryPlan) -> str:
    """One row per IPU: its blocks, each category's bytes, the fullest tile and whether it fits."""
    head = ["IPU", "blocks", *CATEGORIES, "total", "peak tile", "fits"]
    rows = []
    for ipu in memory.ipus:
        blocks = ipu.blocks[0] if len(ipu.blocks) == 1 else f"{ipu.blocks[0]}..{ipu.blocks[-1]}"
        peak = f"{format_bytes(ipu.peak_tile_bytes)} / {format_bytes(ipu.memory_per_tile)} (tile {ipu.worst_tile})"
        rows.append([str(ipu.ipu), blocks, *(format_bytes(ipu.by_category[c]) for c in CATEGORIES),
                     format_bytes(ipu.total_bytes), peak, "yes" if ipu.fits else f"NO ({ipu.tiles_over} tiles over)"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in [head, *rows]]
    io = memory.io
    lines.append(
        f"IO tiles: {io.num_io_tiles} per IPU holding {format_bytes(io.io_bytes)} "
        f"of {format_bytes(io.io_budget_bytes)}; "
        f"host IO {'overlaps' if io.overlap else 'does not overlap'} compute"
    )
    return "\n".join(lines)


def plot_memory_report(memory: MemoryPlan, path: str | Path) -> Path:
    """Stacked bars of each IPU's bytes per category, with the IPU's capacity as a line (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_tiles) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"IPU{m.ipu}" for m in memory.ipus]
    bottom = [0.0] * len(memory.ipus)
    for cat, colour in zip(CATEGORIES, COLOURS):
        values = [m.by_category[cat] / 2**20 for m in memory.ipus]
        ax.bar(labels, values, bottom=bottom, label=cat, color=colour)
        bottom = [b + v for b, v in zip(bottom, values)]
    capacity = memory.ipus[0].memory_per_tile * len(memory.ipus[0].tile_bytes) / 2**20
    ax.axhline(capacity, color="black", linestyle="--", linewidth=1, label="compute-tile memory")
    ax.set_ylabel("MiB")
    ax.set_title("memory per IPU by category")
    ax.legend(fontsize=7)
    for m in memory.ipus:
        ax_tiles.plot(m.tile_bytes / 1024, linewidth=0.6, label=f"IPU{m.ipu}")
    ax_tiles.axhline(memory.ipus[0].memory_per_tile / 1024, color="black", linestyle="--", linewidth=1)
    ax_tiles.set_xlabel("compute tile")
    ax_tiles.set_ylabel("KiB")
    ax_tiles.set_title("bytes per tile")
    ax_tiles.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
