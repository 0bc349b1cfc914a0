"""A study's trajectories picture: the chosen runs of one arm, every batch size, on one loss surface.

The runs are those of the study's ``trajectory`` arm in its first variant with the trajectory seed,
at each batch size's chosen learning rate; their weight snapshots (``launch.study.trajectory``) give the
PCA plane, and the validation loss on a grid of that plane is evaluated by a real training setup
(``launch.train.build.build_training`` and its engine's ``evaluate``) so the numbers are the runs' own.
Collective under ``poprun_py``: instance 0 computes the plane and broadcasts it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from launch.train.build import build_training
from launch.train.distribute import placement
from launch.study.grid import Group, Study, make_point
from launch.study.point import point_config
from launch.study.trajectory import (SNAPSHOTS_FILE, Plane, grid_axes, load_snapshots, load_surface, loss_surface,
                               pca_plane, plot_trajectories, save_surface)

logger = logging.getLogger(__name__)
SURFACE = "trajectories.npz"
PICTURE = "trajectories.png"


def trajectory_runs(study: Study, rows: list[dict], chosen: dict, out: Path) -> list[dict]:
    """The rows whose snapshots make the picture, one per batch size, in batch order."""
    spec = study.trajectory
    arm, variant = study.arm(spec.arm), study.variants[0]
    found = []
    for batch in arm.batches:
        lr = chosen.get(Group(variant, arm, batch).key)
        for r in rows:
            if (r.get("status") == "ok" and r["arm"] == arm.name and r["variant"] == variant.label
                    and r["batch"] == batch and r["seed"] == spec.seed and r["lr"] == lr
                    and (out / r["run_dir"] / SNAPSHOTS_FILE).exists()):
                found.append(r)
                break
    return found


def make_trajectories(study: Study, out: Path, rows: list[dict], chosen: dict, comm, dist,
                      data_path: str) -> Path | None:
    """Compute the plane, the loss grid and the picture; returns the picture's path (instance 0)."""
    lead = dist.instance_index == 0
    runs = trajectory_runs(study, rows, chosen, out) if lead else []
    count = int(comm.broadcast(np.array([len(runs)], np.int64), root=0)[0])
    if count < 1:
        logger.warning("No trajectory snapshots of arm %r: no trajectories picture.", study.trajectory.arm)
        return None
    labels = [f"batch {r['batch']} (lr {r['lr']:.3g})" for r in runs]
    if lead and (out / SURFACE).exists() and load_surface(out / SURFACE)["labels"] == labels:
        fresh = 1  # the same runs as the picture already made
    else:
        fresh = 0
    if int(comm.broadcast(np.array([fresh], np.int64), root=0)[0]):
        logger.info("Trajectories: %s is up to date.", out / SURFACE)
        return out / PICTURE if lead else None
    first = runs[0] if lead else None
    group = Group(study.variants[0], study.arm(study.trajectory.arm), study.arm(study.trajectory.arm).batches[0])
    point = make_point(study, group, first["lr"] if lead else 0.1, study.trajectory.seed, "seeds")
    cfg = point_config(study, point, data_path, out / "surface", dist)
    t = build_training(cfg, comm, placement(cfg, dist))
    params = sorted(t.engine.params, key=lambda p: p.name)
    size = sum(p.data.size for p in params)
    basis = np.zeros((3, size), np.float64)
    coords, plane = [], None
    if lead:
        snaps = [load_snapshots(out / r["run_dir"])[1] for r in runs]
        plane = pca_plane(snaps)
        coords = [plane.project(s) for s in snaps]
        basis[0], basis[1:] = plane.origin, plane.directions
    comm.broadcast(basis, root=0)
    spec = study.trajectory
    xs, ys = grid_axes(coords, spec.grid, spec.margin) if lead else (np.zeros(spec.grid), np.zeros(spec.grid))
    comm.broadcast(xs, root=0)
    comm.broadcast(ys, root=0)

    def loss_at(weights: np.ndarray) -> float:
        offset = 0
        for p in params:
            p.data[...] = weights[offset:offset + p.data.size].reshape(p.data.shape)
            offset += p.data.size
        t.eval_loader.set_position(0, 0)
        return t.engine.evaluate(t.eval_loader)[0]

    shared = Plane(basis[0], basis[1:], plane.explained if plane else (0.0, 0.0))
    logger.info("Trajectories: %d runs, validation loss on a %d x %d grid of their PCA plane.", count, spec.grid,
                spec.grid)
    losses = loss_surface(shared, xs, ys, loss_at)
    if not lead:
        return None
    save_surface(out / SURFACE, shared, labels, coords, xs, ys, losses)
    return redraw(study, out)


def redraw(study: Study, out: Path) -> Path | None:
    """The picture from the saved surface (no training, no evaluation); None without one."""
    if not (out / SURFACE).exists():
        return None
    spec = study.trajectory
    title = f"{study.title}: {study.arm(spec.arm).label}, seed {spec.seed}, {study.variants[0].label}"
    return plot_trajectories(load_surface(out / SURFACE), out / PICTURE, title)
