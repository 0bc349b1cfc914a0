"""The per-layer profile as a PNG: one panel per IPU, a bar per layer stacked by category."""

from __future__ import annotations

from pathlib import Path

from ipu.cost.breakdown import profile_rows
from ipu.cost.bsp import CATEGORIES
from ipu.cost.prediction import Prediction

COLOURS = {"matrix": "#4C72B0", "vector": "#55A868", "exchange": "#DD8452", "sync": "#8172B3"}


def plot_profile(name: str, prediction: Prediction, path: Path) -> Path:
    """Write the profile of ``prediction`` to ``path`` (matplotlib, Agg backend); return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    plan = prediction.plan
    clock = plan.pod.chip.clock_hz
    rows = profile_rows(prediction)
    stages = prediction.stages
    fig, axes = plt.subplots(len(stages), 1, figsize=(14, 3.2 * len(stages)), squeeze=False)
    for ax, stage in zip(axes[:, 0], stages):
        mine = [r for r in rows if r.ipu == stage.ipu]
        bottom = [0.0] * len(mine)
        for category in CATEGORIES:  # one collection of rectangles per category: fast to draw
            heights = [getattr(r.total, category) / clock * 1e6 for r in mine]
            boxes = [[(i - 0.42, b), (i + 0.42, b), (i + 0.42, b + h), (i - 0.42, b + h)]
                     for i, (b, h) in enumerate(zip(bottom, heights))]
            ax.add_collection(PolyCollection(boxes, facecolors=COLOURS[category], linewidths=0, label=category))
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_ylim(0, max(bottom) * 1.15 if mine else 1)
        starts = [i for i, r in enumerate(mine) if i == 0 or r.block != mine[i - 1].block]
        ax.set_xticks(starts)
        ax.set_xticklabels([mine[i].block for i in starts], rotation=90, fontsize=7)
        total = stage.per_micro_batch.total / clock * 1e3
        ax.set_title(f"IPU {stage.ipu}: {len(mine)} layers, {total:.2f} ms per micro-batch "
                     f"(fwd{' + recomp' if stage.recompute else ''} + bwd)", fontsize=10)
        ax.set_ylabel("us per micro-batch")
        ax.set_xlim(-1, len(mine))
        ax.legend(loc="upper right", fontsize=8, ncol=4)
    fig.suptitle(f"{name}: {plan.model} on {plan.system} ({plan.pod.chip.name}), micro-batch {plan.micro_batch}, "
                 f"{prediction.images_per_s:,.0f} images/s predicted", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
