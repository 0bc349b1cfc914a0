"""Solution trajectories of several batch sizes on the loss surface of their common plane.

During a run the weights are recorded every few updates (the run's own checkpoints, see
``launch.study.point``) and kept as ``snapshots.npz`` (updates and flat float32 weights, no
pickle). Afterwards every batch size's trajectory is stacked, centred on the mean of all
snapshots, and projected onto the two main directions of that combined PCA; the loss is
evaluated on a grid of that plane (weights = mean + a u1 + b u2) and drawn as contours under
the paths, start and end marked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

SNAPSHOTS_FILE = "snapshots.npz"


def snapshot_every(total_steps: int, snapshots: int) -> int:
    """Updates between recorded weights so that a run of ``total_steps`` gives about ``snapshots``."""
    if snapshots < 1:
        raise ValueError(f"snapshots={snapshots} must be >= 1")
    return max(1, total_steps // snapshots)


def save_snapshots(run_dir: str | Path, initial: np.ndarray | None, later: list[tuple[int, np.ndarray]]) -> Path:
    """``run_dir/snapshots.npz``: ``updates`` [K] and ``weights`` [K, P] (float32), update 0 first."""
    steps = ([0] if initial is not None else []) + [s for s, _ in later]
    weights = ([initial] if initial is not None else []) + [w for _, w in later]
    path = Path(run_dir) / SNAPSHOTS_FILE
    np.savez(path, updates=np.asarray(steps, np.int64), weights=np.stack(weights).astype(np.float32))
    return path


def load_snapshots(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(Path(run_dir) / SNAPSHOTS_FILE, allow_pickle=False) as f:
        return f["updates"], f["weights"]


@dataclass(frozen=True)
class Plane:
    """The PCA plane of all trajectories: origin (mean snapshot), two unit directions, and the share
    of the snapshots' variance each explains."""

    origin: np.ndarray
    directions: np.ndarray  # [2, P]
    explained: tuple[float, float]

    def project(self, weights: np.ndarray) -> np.ndarray:
        """[K, P] -> [K, 2] coordinates in the plane."""
        return (weights.astype(np.float64) - self.origin) @ self.directions.T

    def point(self, a: float, b: float) -> np.ndarray:
        return (self.origin + a * self.directions[0] + b * self.directions[1]).astype(np.float32)


def pca_plane(trajectories: list[np.ndarray]) -> Plane:
    """The top-2 principal directions of every snapshot of every trajectory together."""
    stacked = np.concatenate(trajectories).astype(np.float64)
    if stacked.shape[0] < 3:
        raise ValueError(f"a PCA plane needs at least 3 snapshots, got {stacked.shape[0]}")
    origin = stacked.mean(axis=0)
    centred = stacked - origin
    # the Gram matrix is K x K (K snapshots), far smaller than P x P
    values, vectors = np.linalg.eigh(centred @ centred.T)
    order = np.argsort(values)[::-1][:2]
    directions = (vectors[:, order].T @ centred) / np.sqrt(np.maximum(values[order], 1e-300))[:, None]
    total = float(values.clip(min=0).sum()) or 1.0
    return Plane(origin, directions, (float(values[order[0]] / total), float(values[order[1]] / total)))


def grid_axes(coords: list[np.ndarray], size: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid lines covering every projected path with ``margin`` of the span on each side."""
    pts = np.concatenate(coords)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    span = np.maximum(hi - lo, 1e-6)
    lo, hi = lo - margin * span, hi + margin * span
    return np.linspace(lo[0], hi[0], size), np.linspace(lo[1], hi[1], size)


def loss_surface(plane: Plane, xs: np.ndarray, ys: np.ndarray, loss_at: Callable[[np.ndarray], float]) -> np.ndarray:
    """``loss_at(weights)`` on every grid point: [len(ys), len(xs)]."""
    return np.array([[loss_at(plane.point(a, b)) for a in xs] for b in ys])


def save_surface(path: str | Path, plane: Plane, labels: list[str], coords: list[np.ndarray], xs, ys, losses) -> None:
    """Everything the picture needs (no weights): paths, grid, losses, explained variance."""
    arrays = {f"path_{i}": c for i, c in enumerate(coords)}
    np.savez(path, xs=xs, ys=ys, losses=losses, explained=np.array(plane.explained), labels=np.array(labels), **arrays)


def load_surface(path: str | Path) -> dict:
    with np.load(path, allow_pickle=False) as f:
        out = {k: f[k] for k in f.files}
    out["paths"] = [out.pop(f"path_{i}") for i in range(len(out["labels"]))]
    out["labels"] = [str(x) for x in out["labels"]]
    return out


def plot_trajectories(surface: dict, path: str | Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 6))
    losses = np.asarray(surface["losses"], np.float64)
    finite = np.isfinite(losses)
    shown = np.where(finite, np.log10(np.clip(losses, 1e-6, None)), np.nan)
    if finite.any():
        cs = ax.contourf(surface["xs"], surface["ys"], shown, levels=20, cmap="viridis", alpha=0.85)
        ax.contour(surface["xs"], surface["ys"], shown, levels=20, colors="k", linewidths=0.3, alpha=0.5)
        fig.colorbar(cs, ax=ax, label="log10 validation loss")
    colours = plt.cm.tab10(np.arange(len(surface["paths"])) % 10)
    for colour, label, xy in zip(colours, surface["labels"], surface["paths"]):
        ax.plot(xy[:, 0], xy[:, 1], "-", color="white", lw=3.6, alpha=0.8)
        ax.plot(xy[:, 0], xy[:, 1], "-", color=colour, lw=1.8, label=label)
        ax.plot(xy[0, 0], xy[0, 1], "o", color="white", mec="k", ms=8)
        ax.plot(xy[-1, 0], xy[-1, 1], "*", color=colour, mec="k", ms=14)
    ex = surface["explained"]
    ax.set_xlabel(f"PC1 ({100 * ex[0]:.1f} % of the snapshots' variance)")
    ax.set_ylabel(f"PC2 ({100 * ex[1]:.1f} %)")
    ax.set_title(title + "\n(o start, * end)", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


__all__ = ["Plane", "grid_axes", "load_snapshots", "load_surface", "loss_surface", "pca_plane",
           "plot_trajectories", "save_snapshots", "save_surface", "snapshot_every"]
