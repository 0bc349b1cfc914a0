"""What a run tells its user (instance 0 only): JSON lines, plots, the summary, the POD prediction.

``metrics.jsonl`` gets one line per weight update (``{"event": "step", "step", "epoch", "loss",
"accuracy", "lr", "images_per_s", "global_batch", ...}``), one per evaluation (``"event":
"eval"``, ``step`` = updates done when it ran) and a final ``"event": "summary"``. On resume the
lines from after the checkpoint are dropped first (an evaluation runs before the checkpoint of
the same update), so the file reads as one uninterrupted run. With ``tensorboard`` (``run.tensorboard``)
the same scalars also go to TensorBoard event files in the run directory (``launch.train.tensorboard``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipu.plan import IpuPlan
from ipu.runtime.phases import PHASES
from launch.train.tensorboard import open_tensorboard
from launch.train.thread_report import describe_threads
from models.profile import LayerProfile

logger = logging.getLogger(__name__)


class MetricsLog:
    """Appends JSON lines to ``<run_dir>/metrics.jsonl``; keeps what happened up to ``resume_step`` (the
    updates before it and their update statistics, the evaluations up to it).

    ``tensorboard``: ``auto``, ``true`` or ``false``, see :func:`launch.train.tensorboard.open_tensorboard`;
    ``tensorboard_every``: updates per TensorBoard point (their mean).
    """

    FLUSH_S = 1.0  # step lines wait at most this long (and any other event) before they reach the file

    def __init__(self, run_dir: str | Path, resume_step: int | None = None, tensorboard: str = "false",
                 tensorboard_every: int = 1) -> None:
        self._tensorboard = open_tensorboard(tensorboard, run_dir, resume_step, tensorboard_every)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_step is not None and self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by the crash
                event, step = record.get("event"), record.get("step", 0)
                if (event in ("step", "update_stats") and step < resume_step) or (event == "eval" and step <= resume_step):
                    kept.append(line)
        self.path.write_text("".join(k + "\n" for k in kept))
        self._file = open(self.path, "a")
        self._pending: list[dict[str, Any]] = []
        self._flushed = time.monotonic()

    def write(self, record: dict[str, Any]) -> None:
        """Queue a record. Step records go to the file and to TensorBoard together, once ``FLUSH_S``
        has passed since the last write; any other event goes at once, with them. Right after a
        model step, with cold caches, one line took 0.1 ms and TensorBoard's scalars 0.1 ms an
        update, each 0.3 % of an update of the default job. The training loop flushes before each
        checkpoint, so a killed run loses only lines of updates after its last checkpoint, which
        the resumed run makes again and writes."""
        self._pending.append(record)
        if record.get("event") != "step" or time.monotonic() - self._flushed >= self.FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Write the queued records to the file (and to the OS) and to TensorBoard."""
        if self._pending and not self._file.closed:
            self._file.write("".join(json.dumps(r, default=_plain) + "\n" for r in self._pending))
            self._file.flush()
            if self._tensorboard is not None:
                for record in self._pending:
                    self._tensorboard.write(record)
            self._pending.clear()
        self._flushed = time.monotonic()

    def close(self) -> None:
        self.flush()
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()

    def records(self) -> list[dict[str, Any]]:
        self.flush()
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def plot_metrics(records: list[dict[str, Any]], run_dir: str | Path) -> list[Path]:
    """``loss.png`` (training loss per update, validation loss per epoch), ``accuracy.png``, and
    ``update_stats.png`` when the run recorded update statistics (``run.update_stats_every``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r for r in records if r.get("event") == "step"]
    evals = [r for r in records if r.get("event") == "eval"]
    out = []
    for key, title in (("loss", "loss"), ("accuracy", "top-1 accuracy")):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([r["step"] for r in steps], [r[key] for r in steps], lw=0.8, label=f"training {title}")
        if evals:
            ax.plot([r["step"] for r in evals], [r[f"val_{key}"] for r in evals], "o-", label=f"validation {title}")
        ax.set_xlabel("weight update")
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = Path(run_dir) / f"{key}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(path)
    from launch.train.update_stats_plot import plot_update_stats

    stats = plot_update_stats({"": records}, Path(run_dir) / "update_stats.png", "update statistics per parameter group")
    return out + ([stats] if stats else [])


def predicted_pod_images_per_s(cfg, image_shape: tuple[int, int, int], num_classes: int,
                               dataset_images: int, profile=None) -> tuple[float, str] | None:
    """The cost model (``ipu.cost.prediction.predict``) for this run's plan (``launch.train.plan.ipu_plan``).

    Returns (images/s for all replicas on the POD, the POD's name), or None with a logged reason
    when the configuration is not one an IPU-POD can run (replicas not a power of two, ...).
    ``profile``: the model's ``list[LayerProfile]`` at the micro-batch, if at hand (else built). A run
    predicts its own compiled plan instead (:func:`predicted_pod`).
    """
    from ipu.cost.prediction import predict
    from ipu.plan import load_profile
    from launch.train.plan import ipu_plan

    try:
        plan = ipu_plan(cfg, image_shape, num_classes, dataset_images)
        prediction = predict(plan, profile if profile is not None else load_profile(plan))
        return prediction.images_per_s, plan.system
    except (ValueError, KeyError, RuntimeError, TypeError) as err:
        logger.warning("No POD prediction for this configuration: %s", err)
        return None


def predicted_pod(plan: IpuPlan, profile: Sequence[LayerProfile]) -> tuple[float, str] | None:
    """The cost model (``ipu.cost.prediction.predict``) for a run's compiled plan and the profile it was placed
    with: (images/s for all replicas on the POD, the POD's name), or None with a logged reason when the cost
    model cannot cost the plan."""
    from ipu.cost.prediction import predict

    try:
        return predict(plan, profile).images_per_s, plan.system
    except ValueError as err:
        logger.warning("No POD prediction for this run: %s", err)
        return None


def summary_text(summary: dict[str, Any]) -> str:
    """The framed end-of-run block."""
    width = 64
    lines = ["=" * width, "Training summary".center(width), "-" * width]
    for key, value in summary.items():
        if isinstance(value, float):
            value = f"{value:.4g}" if math.isfinite(value) else str(value)
        lines.append(f"{key:<28} {value}")
    lines.append("=" * width)
    return "\n".join(lines)


__all__ = ["MetricsLog", "plot_metrics", "predicted_pod", "predicted_pod_images_per_s", "run_end_text", "summary_text",
           "throughput_text"]


def throughput_text(summary: dict[str, Any]) -> str:
    """The CPU rate twice: over the run's wall time (start-up, compiling, evaluations included) and in
    the steady state (the median update after the first), with the seconds spent compiling kernels."""
    wall = f"{summary['cpu_images_per_s']:,.1f} images/s over the wall time"
    if summary.get("compile_s", 0.0) >= 0.5:
        wall += f" ({summary['compile_s']:.0f} s of it compiling kernels, a first run on this CPU)"
    steady = summary.get("steady_images_per_s", float("nan"))
    if steady is None or not math.isfinite(steady):
        return wall
    return f"{wall}, {steady:,.1f} images/s in the steady state (median update after the first)"


def run_end_text(summary: dict[str, Any], threads, num_instances: int) -> str:
    """The lines a run ends with: the summary table, the threads, the throughput (CPU and the POD
    prediction), where the update time went, and, with several instances, the one the others wait for."""
    own_lines = ("instance_", "critical_", "kernel_")  # per-instance lists, the critical path, kernel choices
    lines = [summary_text({k: v for k, v in summary.items() if k != "event" and not k.startswith(own_lines)}),
             f"Threads: {describe_threads(threads)}",
             f"CPU-emulated throughput: {throughput_text(summary)}; predicted on "
             f"{summary['predicted_pod']}: {summary['predicted_pod_images_per_s'] or float('nan'):,.0f} images/s"]
    if "outside_model_share" in summary:
        parts = ", ".join(f"{name.replace('_', ' ')} {summary[f'share_{name}']:.1%}" for name in PHASES
                          if name != "model")
        lines.append(f"Update time outside the model (instance 0): {summary['outside_model_share']:.1%} ({parts}, "
                     f"other {summary['share_other']:.1%})")
    if summary.get("critical_instance") is not None and num_instances > 1:
        waits = ", ".join(f"{w:.1%}" for w in summary["instance_wait_share"])
        lines.append(f"On instance {summary['critical_instance']}, the one the others wait for: "
                     f"{summary['critical_outside_model_share']:.1%} outside the model; each instance's wait for it "
                     f"(0, 1, ...): {waits} of its update time")
    return "\n".join(lines)
