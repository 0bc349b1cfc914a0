"""One point of a study: a real training run through ``launch.train``, summarised as one result row.

The run is ``launch.train.build.build_training`` + ``launch.train.loop.run`` on the point's configuration,
with its own ``run_dir`` (``metrics.jsonl``, checkpoints at every epoch end, so a killed point
resumes from its last epoch). The row holds its provenance (``launch.study.provenance``: commit, data
hash, resolved configuration) and its folder relative to the study's, the validation curve, final and
best accuracy and loss, the test split's accuracy and loss and its predicted class per image (fresh-seed
points: ``launch.study.paired``), updates and epochs to the
target accuracy, CPU seconds (a resumed point: both parts, flagged), the update statistics when the study
records them, and the time the IPU cost model predicts for the same global batch on the study's POD.
Failures become rows too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from launch.train import checkpoint as ckpt
from launch.train import run_dir as rundir
from launch.train.build import build_training
from launch.train.config import TrainConfig
from launch.train.config_file import load_config, override_keys
from launch.train.distribute import distribute, placement
from launch.train.loop import resume, run
from launch.train.report import predicted_pod_images_per_s
from launch.study.grid import Point, Study, point_overrides, pod_split
from launch.study.paired import encode
from launch.study.trajectory import save_snapshots, snapshot_every

logger = logging.getLogger(__name__)


def point_config(study: Study, point: Point, data_path: str, run_dir: Path, dist, snapshots: int = 0) -> TrainConfig:
    overrides = point_overrides(study, point, data_path, str(run_dir))
    cfg = distribute(load_config(study.base, overrides), dist, override_keys(overrides))  # a point's batch is fixed
    if snapshots:  # a checkpoint every few updates is the weight snapshot; keep them all
        cfg = replace(cfg, run=replace(cfg.run, keep_checkpoints=10**6))
    return cfg


def run_point(study: Study, point: Point, data_path: str, run_dir: Path, comm, dist, snapshots: int = 0,
              provenance: dict | None = None) -> dict:
    """Train the point (resuming a killed attempt) and return its row; errors are caught into the row.
    ``provenance``: the code state and the data hash (``launch.study.provenance``) the row records."""
    row = _base_row(study, point, provenance or {})
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        cfg = point_config(study, point, data_path, run_dir, dist, snapshots)
        row["config"] = json.loads(json.dumps(cfg.to_dict()))
        decision = rundir.prepare(cfg.to_dict(), comm, lead=dist.instance_index == 0, how="auto")
        t = build_training(cfg, comm, placement(cfg, dist))
        t.run_id = decision.run_id
        if snapshots:
            every = snapshot_every(t.total_steps, snapshots)
            t.cfg = cfg = replace(cfg, run=replace(cfg.run, checkpoint_every=every))
        resumed = resume(t, decision)
        if dist.instance_index == 0:
            rundir.record_identity(decision, cfg.to_dict(), t.engine.params)
        row.update(resumed=resumed, resumed_from_update=t.engine.step if resumed else 0)
        initial = _flat_weights(t) if snapshots and not resumed else None
        with _output_to(run_dir / "train.log", dist.instance_index == 0):
            code = run(t, resumed)
        if code:
            raise RuntimeError(f"launch.train.loop.run exited with {code}")
        cpu = float(comm.allreduce(np.array([time.process_time() - cpu0]), op="sum")[0])
        predicted = test_predictions(t)  # collective; after the CPU count: no part of the training
        if resumed:  # the earlier part's CPU seconds, up to the checkpoint this part resumed from
            row["cpu_s_parts"] = [t.cpu_before, cpu]
        if dist.instance_index == 0:
            row.update(summarise_run(study, cfg, t, cpu + t.cpu_before, time.perf_counter() - wall0, point.phase))
            if predicted is not None:
                row["test_predictions"] = encode(predicted)
            if snapshots:
                save_snapshots(run_dir, initial, _checkpoint_weights(run_dir))
        _drop_checkpoints(run_dir, dist.instance_index == 0)
    except Exception as err:  # noqa: BLE001 - a failing point is recorded, the study goes on
        logger.warning("Point %s failed: %s: %s", point.id, type(err).__name__, err)
        logger.debug("Traceback:", exc_info=True)
        row.update(status="failed", error=f"{type(err).__name__}: {err}",
                   traceback=traceback.format_exc(limit=6)[-2000:], cpu_s=time.process_time() - cpu0,
                   wall_s=time.perf_counter() - wall0)
    return row


def test_predictions(t) -> np.ndarray | None:
    """Each test image's predicted class with the final weights (the EMA's when there is one), as the run's
    test accuracy was measured; None without a test split. Collective."""
    if t.test_loader is None:
        return None
    predicted = np.zeros(t.test_loader.dataset.info.num_samples, np.int64)
    t.test_loader.set_position(0, 0)
    t.engine.evaluate(t.test_loader, use_ema=t.engine.ema is not None, predictions=predicted)
    return predicted


def _base_row(study: Study, point: Point, provenance: dict) -> dict[str, Any]:
    g = point.group
    return {"id": point.id, "study": study.name, "quick": study.quick, "variant": g.variant.label, "arm": g.arm.name,
            "batch": g.batch, "seed": point.seed, "lr": point.lr, "lr_mode": g.arm.lr.mode, "phase": point.phase,
            "micro_batch": point.micro_batch, "grad_accum": point.grad_accum, "replicas": point.replicas,
            "run_dir": f"points/{point.id}", "status": "ok", "target_accuracy": study.target_accuracy,
            "validation_fraction": study.validation_fraction, "split_seed": study.split_seed,
            **provenance.get("code", {}), "data_sha256": provenance.get("data_sha256", "")}


def summarise_run(study: Study, cfg: TrainConfig, t, cpu_s: float, wall_s: float, phase: str = "seeds") -> dict[str, Any]:
    """The row's numbers from the run's ``metrics.jsonl`` and the cost model."""
    records = [json.loads(x) for x in Path(cfg.run.run_dir, "metrics.jsonl").read_text().splitlines() if x.strip()]
    records = records[_last_start(records):]
    curve = epoch_curve(records)
    if not curve:
        raise RuntimeError(f"{cfg.run.run_dir}/metrics.jsonl has no evaluation: the run ended before an epoch did")
    for c in curve:
        c["epochs_done"] = c["step"] / t.loader.steps_per_epoch
    final, best = curve[-1], max(curve, key=lambda c: c["val_accuracy"])
    info = t.train_set.info
    pod = pod_step_seconds(cfg, info, study.pod)
    row: dict[str, Any] = {
        "epochs": cfg.run.epochs, "updates": t.engine.step, "updates_per_epoch": t.loader.steps_per_epoch,
        "train_images": info.num_samples,
        "validation_images": t.eval_loader.dataset.info.num_samples if t.eval_loader is not None else 0,
        "final_val_accuracy": final["val_accuracy"],
        "final_val_loss": final["val_loss"], "best_val_accuracy": best["val_accuracy"],
        "best_val_loss": min(c["val_loss"] for c in curve), "cpu_s": cpu_s, "wall_s": wall_s, "curve": curve,
        "instances": t.placement.num_instances, "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    test = next((r for r in reversed(records) if r.get("event") == "test"), None)
    if test is not None:
        row.update(test_accuracy=test["test_accuracy"], test_loss=test["test_loss"], test_images=test["test_samples"])
    row.update(update_statistics(records, keep_series=phase == "seeds"))
    if pod is not None:
        step_s, pod_replicas, pod_micro, pod_accum = pod
        row.update(pod=study.pod, pod_replicas=pod_replicas, pod_micro_batch=pod_micro, pod_grad_accum=pod_accum,
                   pod_step_s=step_s, pod_s_total=step_s * t.engine.step)
    row.update(to_target(row, study.target_accuracy))
    return row


def to_target(row: dict, target: float) -> dict[str, Any]:
    """Updates, epochs, CPU seconds (pro rata by updates) and predicted POD seconds until the first
    evaluation at or above ``target``; None where the run never reached it."""
    hit = next((c for c in row.get("curve", []) if c["val_accuracy"] >= target), None)
    step = hit["step"] if hit else None
    return {"target_accuracy": target, "updates_to_target": step,
            "epochs_to_target": round(hit.get("epochs_done", hit["epoch"]), 4) if hit else None,
            "cpu_s_to_target": row["cpu_s"] * step / row["updates"] if hit else None,
            "pod_s_to_target": row["pod_step_s"] * step if hit and row.get("pod_step_s") else None}


def _last_start(records: list[dict]) -> int:
    """Index of the first record of the run's latest start from update 0 (a re-run in a reused folder)."""
    starts = [i for i, r in enumerate(records) if r.get("event") == "step" and int(r["step"]) == 0]
    return starts[-1] if starts else 0


SERIES_POINTS = 48  # update_stats records kept in a row (evenly spaced): the picture, not the analysis


def update_statistics(records: list[dict], keep_series: bool) -> dict[str, Any]:
    """The run's weight drift per group, and (``keep_series``) up to :data:`SERIES_POINTS` of its
    ``update_stats`` records, values to 4 significant digits; empty when the run recorded none."""
    drift = next((r for r in reversed(records) if r.get("event") == "weight_drift"), None)
    if drift is None:
        return {}
    out: dict[str, Any] = {"weight_drift": {g: float(f"{v:.4g}") for g, v in drift["groups"].items()}}
    stats = [r for r in records if r.get("event") == "update_stats"]
    if keep_series and stats:
        picks = sorted({int(round(i)) for i in np.linspace(0, len(stats) - 1, min(SERIES_POINTS, len(stats)))})
        out["update_stats"] = [{"event": "update_stats", "step": stats[i]["step"],
                                "groups": {g: {k: float(f"{v:.4g}") for k, v in s.items() if v is not None and math.isfinite(v)}
                                           for g, s in stats[i]["groups"].items()}} for i in picks]
    return out


def epoch_curve(records: list[dict]) -> list[dict[str, float]]:
    """One entry per evaluation: epochs done, updates done, validation loss and accuracy, and the
    mean training loss over that epoch's updates."""
    losses: dict[int, list[float]] = {}
    for r in records:
        if r.get("event") == "step":
            losses.setdefault(int(r["epoch"]), []).append(float(r["loss"]))
    return [{"epoch": int(r["epoch"]) + 1, "step": int(r["step"]), "val_loss": float(r["val_loss"]),
             "val_accuracy": float(r["val_accuracy"]),
             "train_loss": float(np.mean(losses[int(r["epoch"])])) if losses.get(int(r["epoch"])) else math.nan}
            for r in records if r.get("event") == "eval"]


def pod_step_seconds(cfg: TrainConfig, info, pod: str) -> tuple[float, int, int, int] | None:
    """Seconds per weight update of this global batch on ``pod``, as the cost model predicts it
    (``launch.train.report.predicted_pod_images_per_s``, which calls ``ipu.cost.prediction.predict``): the batch
    spread over as many replicas as the POD holds, micro-batches no larger than the run's."""
    from ipu.specs import PODS

    if pod not in PODS:
        raise ValueError(f"study pod {pod!r} is not one of {', '.join(PODS)}")
    replicas, micro, accum = pod_split(cfg.global_batch, PODS[pod].num_ipus, cfg.ipu.ipus_per_replica,
                                       cfg.data.micro_batch)
    # list-valued model options (dense hidden sizes) as tuples: the plan's profile is cached by them
    options = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in cfg.model.options)
    on_pod = replace(cfg, data=replace(cfg.data, replicas=replicas, micro_batch=micro, grad_accum=accum),
                     ipu=replace(cfg.ipu, system=pod), model=replace(cfg.model, options=options))
    predicted = predicted_pod_images_per_s(on_pod, info.image_shape, info.num_classes, info.num_samples)
    if predicted is None:
        return None
    return cfg.global_batch / predicted[0], replicas, micro, accum


def _flat_weights(t) -> np.ndarray:
    return np.concatenate([p.data.ravel() for p in sorted(t.engine.params, key=lambda p: p.name)]).astype(np.float32)


def _checkpoint_weights(run_dir: Path) -> list[tuple[int, np.ndarray]]:
    """(update, flat weights) of every checkpoint, in update order (parameters sorted by name)."""
    out = []
    for path in sorted(ckpt.checkpoint_dir(run_dir).glob("ckpt-*.h5")):
        arrays, meta = ckpt.load_checkpoint(path)
        weights = ckpt.split_prefix(arrays, "model")
        out.append((int(meta["engine_step"]), np.concatenate([weights[k].ravel() for k in sorted(weights)])))
    return out


def _drop_checkpoints(run_dir: Path, lead: bool) -> None:
    if lead:
        shutil.rmtree(ckpt.checkpoint_dir(run_dir), ignore_errors=True)


@contextlib.contextmanager
def _output_to(path: Path, lead: bool):
    """The run's printed summary goes to its ``train.log``, not the study's console."""
    if not lead:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f, contextlib.redirect_stdout(f):
        yield
