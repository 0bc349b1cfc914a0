"""A study's pictures: validation curves per batch size (a panel per arm), test accuracy against the
batch size, time to the target accuracy against the batch size (CPU and predicted POD), and the update
statistics (LARS trust ratio, effective step, drift per parameter group) of each arm's first fresh seed.

Every line is the mean over a group's fresh seeds at its chosen rate; bands are one standard deviation
over seeds, the test accuracy's error bars its 95 % t interval.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from launch.study.grid import Study, slug


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend(ax, size: int) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def _save(fig, path: Path, title: str) -> Path:
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def _curve(rows: tuple[dict, ...], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Epochs, mean and std over seeds of one curve key (runs cut to the shortest)."""
    curves = [r["curve"] for r in rows if r.get("curve")]
    n = min(len(c) for c in curves)
    values = np.array([[c[i][key] for i in range(n)] for c in curves], np.float64)
    epochs = np.array([curves[0][i].get("epochs_done", curves[0][i]["epoch"]) for i in range(n)])
    return epochs, values.mean(axis=0), values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros(n)


def plot_curves(study: Study, summaries, variant, path: Path) -> Path:
    """Validation accuracy (top) and loss (bottom; training loss dashed) per epoch, one column per arm."""
    plt = _plt()
    arms = study.arms
    fig, axes = plt.subplots(2, len(arms), figsize=(4.2 * len(arms), 7), squeeze=False, sharey="row")
    batches = sorted({b for a in arms for b in a.batches})
    colours = dict(zip(batches, plt.cm.viridis(np.linspace(0, 0.9, len(batches)))))
    for col, arm in enumerate(arms):
        top, bottom = axes[0][col], axes[1][col]
        for s in summaries:
            if s.group.variant != variant or s.group.arm != arm or not s.rows:
                continue
            c = colours[s.group.batch]
            label = f"batch {s.group.batch} (lr {s.lr:.3g})"
            x, m, sd = _curve(s.rows, "val_accuracy")
            top.plot(x, 100 * m, "o-", color=c, ms=3, label=label)
            top.fill_between(x, 100 * (m - sd), 100 * (m + sd), color=c, alpha=0.15)
            x, m, sd = _curve(s.rows, "val_loss")
            bottom.plot(x, m, "o-", color=c, ms=3, label=label)
            bottom.fill_between(x, m - sd, m + sd, color=c, alpha=0.15)
            x, m, _ = _curve(s.rows, "train_loss")
            bottom.plot(x, m, "--", color=c, lw=0.9)
        top.set_title(arm.label)
        top.axhline(100 * study.target_accuracy, color="grey", lw=0.8, ls=":")
        top.set_ylabel("validation accuracy %")
        bottom.set_ylabel("validation loss (dashed: training)")
        bottom.set_xlabel("epoch")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        _legend(top, 7)
    return _save(fig, path, f"{study.title}: {variant.label} (mean ± std over seeds)")


def plot_final_accuracy(study: Study, summaries, path: Path, variants) -> Path:
    """Test accuracy (mean and 95 % interval over the fresh seeds) against the global batch size, one line
    per arm, a panel per variant."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(variants), figsize=(5.5 * len(variants), 4.2), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for i, arm in enumerate(study.arms):
            mine = [s for s in summaries if s.group.variant == variant and s.group.arm == arm and s.rows]
            if not mine:
                continue
            x = [s.group.batch for s in mine]
            intervals = [s.interval("test_accuracy") for s in mine]
            y = [100 * c.mean for c in intervals]
            err = [100 * c.half_width if math.isfinite(c.half_width) else 0.0 for c in intervals]
            ax.errorbar(x, y, yerr=err, marker="os^dv<>"[i % 7], capsize=3, label=arm.label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch size")
        ax.set_title(variant.label, fontsize=9)
        ax.grid(alpha=0.3)
        _legend(ax, 8)
    axes[0][0].set_ylabel("test accuracy % (95 % interval over the fresh seeds)")
    return _save(fig, path, f"{study.title}: test accuracy against batch size")


def plot_time_to_target(study: Study, summaries, path: Path) -> Path:
    """CPU seconds and predicted POD seconds to the target accuracy against the batch size."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    keys = (("updates_to_target", "updates to target"), ("cpu_s_to_target", "CPU seconds to target (this machine)"),
            ("pod_s_to_target", f"predicted {study.pod} seconds to target"))
    for ax, (key, label) in zip(axes, keys):
        for i, arm in enumerate(study.arms):
            for j, variant in enumerate(study.variants):
                mine = [s for s in summaries if s.group.variant == variant and s.group.arm == arm and s.reached]
                if not mine:
                    continue
                name = arm.label + (f", {variant.label}" if len(study.variants) > 1 else "")
                if not any(math.isfinite(s.mean(key)) for s in mine):
                    continue
                ax.plot([s.group.batch for s in mine], [s.mean(key) for s in mine], marker="os^dv<>"[i % 7],
                        ls=["-", "--", ":", "-."][j % 4], label=name)
        ax.set_xscale("log", base=2)
        if ax.lines:
            ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no run reached the target", ha="center", transform=ax.transAxes)
        ax.set_xlabel("global batch size")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, which="both")
    _legend(axes[0], 7)
    return _save(fig, path, f"{study.title}: to {100 * study.target_accuracy:.0f} % validation accuracy (runs that "
                 "reached it; checked each epoch)")


def plot_all(study: Study, summaries, out: Path) -> list[Path]:
    """Every picture of the study into ``out`` (variants without a finished run get none); their paths."""
    (out / "update_stats.png").unlink(missing_ok=True)
    for old in out.glob("curves-*.png"):
        old.unlink()
    measured = [v for v in study.variants if any(s.rows for s in summaries if s.group.variant == v)]
    paths = [plot_curves(study, summaries, v, out / f"curves-{slug(v.label)}.png") for v in measured]
    paths.append(plot_final_accuracy(study, summaries, out / "final_accuracy.png", measured or study.variants[:1]))
    paths.append(plot_time_to_target(study, summaries, out / "time_to_target.png"))
    from launch.train.update_stats_plot import plot_update_stats

    runs = {}
    for s in summaries:  # the first fresh seed whose series starts at update 0 (a complete one)
        row = next((r for r in s.rows if r.get("update_stats") and r["update_stats"][0]["step"] == 0), None)
        if s.group.variant == study.variants[0] and row is not None:
            runs[f"{s.group.arm.label}, batch {s.group.batch}, lr {s.lr:.3g}, seed {row['seed']}"] = row["update_stats"]
    stats = plot_update_stats(runs, out / "update_stats.png", f"{study.title}: what each update does to the weights "
                              f"({study.variants[0].label}; per chosen arm, its first fresh seed with a complete series)")
    return paths + ([stats] if stats else [])
