"""The compile memory report: bytes per IPU by category, as a text table and a PNG plot."""

from __future__ import annotations

from pathlib import Path

from ipu.memory import CATEGORIES, MemoryPlan, format_bytes

COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3")


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
