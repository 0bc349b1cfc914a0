"""The picture of ``update_stats`` records (``models.optim.probe``): per parameter group, over the updates, the
LARS trust ratio, the effective step ``|dw| / |w|`` and the drift ``|w - w_0| / |w_0|``; one row of panels per run."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

PANELS = (("trust_ratio", "LARS trust ratio (median over the group's tensors)"),
          ("step", "effective step |dw| / |w|"), ("drift", "drift |w - w0| / |w0|"))


def update_series(records: list[dict]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """``{group: {key: (updates, values)}}`` from a run's ``update_stats`` records (finite values only)."""
    out: dict[str, dict[str, tuple[list[int], list[float]]]] = {}
    for r in records:
        if r.get("event") != "update_stats":
            continue
        for group, stats in r["groups"].items():
            for key, value in stats.items():
                if value is not None and math.isfinite(value):
                    xs, ys = out.setdefault(group, {}).setdefault(key, ([], []))
                    xs.append(int(r["step"]) + 1)
                    ys.append(float(value))
    return out


def _group_order(name: str) -> tuple:
    parts = name.split(".")
    return (name == "exempt", parts[0], int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, name)


def plot_update_stats(runs: dict[str, list[dict]], path: str | Path, title: str) -> Path | None:
    """One row per run (``{label: records}``), one panel per quantity, one line per group, log scales.
    None when no run has ``update_stats`` records."""
    series = {label: update_series(records) for label, records in runs.items()}
    series = {label: s for label, s in series.items() if s}
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({g for s in series.values() for g in s}, key=_group_order)
    named = [g for g in groups if g != "exempt"]  # tab10 tells ten groups apart; beyond that a gradient
    colours = dict(zip(named, plt.cm.tab10(range(len(named))) if len(named) <= 10 else
                       plt.cm.viridis([i / max(len(named) - 1, 1) for i in range(len(named))])))
    fig, axes = plt.subplots(len(series), len(PANELS), figsize=(5 * len(PANELS), 3.2 * len(series)), squeeze=False)
    for index, (row, (label, groups_of_run)) in enumerate(zip(axes, series.items())):
        row[0].set_ylabel(textwrap.fill(label, 32), fontsize=8)  # the run, once per row
        for ax, (key, name) in zip(row, PANELS):
            for group in groups:
                xs, ys = groups_of_run.get(group, {}).get(key, ([], []))
                xs, ys = [x for x, y in zip(xs, ys) if y > 0], [y for y in ys if y > 0]  # log scale: an update of 0 is off it
                if xs:
                    ax.plot(xs, ys, lw=1.0, color="k" if group == "exempt" else colours[group], ls=":" if group == "exempt" else "-",
                            label=group)
            if ax.lines:
                ax.set_yscale("log")
            else:
                ax.text(0.5, 0.5, "none (no LARS tensors)" if key == "trust_ratio" else "no records", ha="center",
                        transform=ax.transAxes)
                ax.set_xticks([])
                ax.set_yticks([])
            if index == 0:
                ax.set_title(name, fontsize=9)  # the quantity, once per column
            ax.set_xlabel("weight update")
            ax.grid(alpha=0.3, which="both")
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes.flat), key=lambda hl: len(hl[0]))
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="center right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.9, 1 - 0.35 / fig.get_figheight()))  # room for the title
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


__all__ = ["plot_update_stats", "update_series"]
