"""What a run records besides its losses: the test split at the end, the per-group update statistics, and
the run's CPU seconds across the parts of a resumed run.

* ``run.evaluate_test``: the final weights (the EMA's when there is one) on the test split
  (``data.split``), once, as ``{"event": "test", ...}`` in ``metrics.jsonl`` and in ``summary.json``.
* ``run.update_stats_every``: the engine's ``models.optim.probe.UpdateProbe`` records, written as
  ``{"event": "update_stats", ...}`` lines after each host call, and ``{"event": "weight_drift", ...}``
  at the end.
* The CPU seconds of every instance since this part of the run began, plus those of the earlier parts
  (each checkpoint carries the total so far, ``cpu_s`` in its meta).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from launch.train.build import Training

logger = logging.getLogger(__name__)


def run_cpu_seconds(t: Training) -> float:
    """CPU seconds of the whole run so far, every instance and thread, earlier parts included. Collective."""
    mine = np.array([time.process_time() - t.cpu_origin])
    return t.cpu_before + float(t.engine.comm.allreduce(mine, op="sum")[0])


def write_update_stats(t: Training, log) -> None:
    """The probe's records since the last call into ``metrics.jsonl`` (instance 0; the others drop theirs)."""
    probe = t.engine.probe
    if probe is None:
        return
    for record in probe.drain():
        if log is not None:
            log.write(record)


def finish_records(t: Training, log) -> dict:
    """At the end of training: the weight drift and the test split (collective). The summary's extra fields."""
    extra: dict = {}
    write_update_stats(t, log)
    if t.engine.probe is not None and log is not None:
        log.write(t.engine.probe.drift(t.engine.step))
    if t.test_loader is not None:
        e = t.engine
        t.test_loader.set_position(0, 0)
        loss, acc, count = e.evaluate(t.test_loader, use_ema=e.ema is not None)
        logger.info("Test split (update %d): loss %.4f, accuracy %.4f on %d images%s.", e.step, loss, acc, count,
                    " (EMA weights)" if e.ema is not None else "")
        extra = {"test_loss": loss, "test_accuracy": acc, "test_samples": count}
        if log is not None:
            log.write({"event": "test", "step": e.step, **extra})
    return extra


__all__ = ["finish_records", "run_cpu_seconds", "write_update_stats"]
