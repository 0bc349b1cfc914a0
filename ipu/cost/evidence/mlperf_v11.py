"""Graphcore's MLPerf Training v1.1 ResNet-50 runs on Mk2 IPU-PODs, as their logs record them.

Source: ``mlcommons/training_results_v1.1`` @ ebe92f8, ``Graphcore/results/ipu-pod{16,64,128,256}-TF1/
resnet/result_{0..4}.txt`` (MLPerf logging lines ``:::MLLOG {...}``), with the configuration in
``Graphcore/benchmarks/resnet/implementations/tensorflow/configs.yml``. Every run logs its
``global_batch_size``, ``gradient_accumulation_steps`` and ``model_bn_span`` and an
``epoch_start``/``epoch_stop`` pair per epoch. Every fourth epoch is about 30 % longer (it holds the
evaluation and the host-side work of a new block); the training rate is read from the lower quartile
of all epoch durations of the five runs (``epoch_seconds`` + ``training_epoch_s``), which lies among the
short epochs. ``EPOCH_S`` also holds the median and the minimum, the alternatives the cost model's
sensitivity shows (``Assumptions.outer_ring_statistic``). All replicas run micro-batch 20 (``global_batch / (replicas x GA)``), LARS, ``BN_span`` 2
(statistics over 40 images = 2 replicas).

The POD128 and POD256 runs do the same work per replica (micro-batch 20, GA 2): their step times differ
by what the larger POD adds, the outer all-reduce ring over 4 instead of 2 IPU-Link domains. That
difference is the one figure the cost model is calibrated on (``ipu.cost.collectives``); every Bow
comparison, and the Mk2 POD16 and POD64 rows, stay out of sample.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

SOURCE = ("Graphcore MLPerf Training v1.1 ResNet-50 logs, mlcommons/training_results_v1.1 "
          "Graphcore/results/ipu-pod{N}-TF1/resnet/result_0..4.txt")
TRAIN_SAMPLES = 1_281_167  # the logs' train_samples


@dataclass(frozen=True)
class MlperfRun:
    """One POD's submission: its shape and the lower-quartile epoch of its five runs (seconds)."""

    system: str
    replicas: int
    global_batch: int
    gradient_accumulation: int
    epoch_s: float

    @property
    def micro_batch(self) -> int:
        return self.global_batch // (self.replicas * self.gradient_accumulation)

    @property
    def step_s(self) -> float:
        """Seconds per weight update: the epoch over its updates."""
        return self.epoch_s / (TRAIN_SAMPLES / self.global_batch)

    @property
    def images_per_s(self) -> float:
        return TRAIN_SAMPLES / self.epoch_s


STATISTICS = ("lower_quartile", "median", "minimum")
# Read from the logs with ``epoch_seconds`` and ``training_epoch_s`` with each statistic (over 190, 190,
# 205 and 225 epochs).
EPOCH_S: dict[str, dict[str, float]] = {
    "lower_quartile": {"POD16": 43.216, "POD64": 11.846, "POD128": 6.907, "POD256": 3.678},
    "median": {"POD16": 43.4755, "POD64": 11.861, "POD128": 7.189, "POD256": 3.930},
    "minimum": {"POD16": 43.188, "POD64": 11.819, "POD128": 6.884, "POD256": 3.642},
}
RUNS: dict[str, MlperfRun] = {
    "POD16": MlperfRun("POD16", 16, 3200, 10, EPOCH_S["lower_quartile"]["POD16"]),
    "POD64": MlperfRun("POD64", 64, 3840, 3, EPOCH_S["lower_quartile"]["POD64"]),
    "POD128": MlperfRun("POD128", 128, 5120, 2, EPOCH_S["lower_quartile"]["POD128"]),
    "POD256": MlperfRun("POD256", 256, 10240, 2, EPOCH_S["lower_quartile"]["POD256"]),
}


def epoch_seconds(lines: Iterable[str]) -> list[float]:
    """The duration of every epoch in an MLPerf log (``epoch_start`` to ``epoch_stop`` of the same
    ``epoch_num``), in seconds, in log order; other lines are ignored."""
    started: dict[int, int] = {}
    out = []
    for line in lines:
        if not line.startswith(":::MLLOG "):
            continue
        record = json.loads(line[len(":::MLLOG "):])
        key = record.get("key")
        if key in ("epoch_start", "epoch_stop"):
            epoch = record["metadata"]["epoch_num"]
            if key == "epoch_start":
                started[epoch] = record["time_ms"]
            elif epoch in started:
                out.append((record["time_ms"] - started.pop(epoch)) / 1e3)
    return out


def training_epoch_s(durations: Iterable[float], statistic: str = "lower_quartile") -> float:
    """The training epoch of a set of epoch durations: their lower quartile (the evaluation epochs
    are the long quarter), or their median or minimum."""
    values = np.asarray(list(durations), dtype=float)
    if values.size == 0:
        raise ValueError("no epochs in the logs: expected ':::MLLOG' lines with epoch_start and epoch_stop")
    if statistic == "lower_quartile":
        return float(np.percentile(values, 25, method="lower"))
    if statistic == "median":
        return float(np.median(values))
    if statistic == "minimum":
        return float(values.min())
    raise ValueError(f"unknown statistic {statistic!r}: choose one of {', '.join(STATISTICS)}")


def outer_ring_delta_s(statistic: str = "lower_quartile") -> float:
    """Seconds the POD256 run's step takes over the POD128 run's at the same per-replica work, the
    epochs read with ``statistic``."""
    if statistic not in EPOCH_S:
        raise ValueError(f"unknown statistic {statistic!r}: choose one of {', '.join(STATISTICS)}")
    runs = {system: replace(RUNS[system], epoch_s=EPOCH_S[statistic][system]) for system in ("POD128", "POD256")}
    return runs["POD256"].step_s - runs["POD128"].step_s
