"""Run outputs: the metrics log across a resume, plots, the POD prediction, the summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launch.train import report
from launch.train.config_file import load_config
from launch.train.report import MetricsLog, plot_metrics, predicted_pod_images_per_s, summary_text

ROOT = Path(__file__).resolve().parents[3]


def test_resume_drops_the_lines_written_after_the_checkpoint(tmp_path):
    log = MetricsLog(tmp_path)
    for step in range(6):
        log.write({"event": "step", "step": step, "loss": 1.0 / (step + 1), "accuracy": 0.1 * step})
    for step in (4, 6):  # the evaluation at update 4 ran before the checkpoint at 4
        log.write({"event": "eval", "step": step, "val_loss": 0.5, "val_accuracy": 0.4})
    for step in (0, 3, 4):  # the probe's records of updates 0 and 3 are kept; update 4 is made again
        log.write({"event": "update_stats", "step": step, "lr": 0.1, "groups": {}})
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"event": "step", "step": 6, "lo')  # torn by the crash
    log = MetricsLog(tmp_path, resume_step=4)
    records = log.records()
    assert [(r["event"], r["step"]) for r in records] == [("step", 0), ("step", 1), ("step", 2), ("step", 3),
                                                           ("eval", 4), ("update_stats", 0), ("update_stats", 3)]
    paths = plot_metrics(records, tmp_path)
    assert [p.name for p in paths] == ["loss.png", "accuracy.png"] and all(p.stat().st_size > 1000 for p in paths)
    log.close()


def test_step_lines_reach_the_file_together_and_any_other_event_takes_them_along(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(report.time, "monotonic", lambda: clock[0])
    log = MetricsLog(tmp_path)

    def on_disk():
        return [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]

    for step in range(3):
        log.write({"event": "step", "step": step})
    assert on_disk() == []  # queued: under FLUSH_S since the last write
    clock[0] += MetricsLog.FLUSH_S
    log.write({"event": "step", "step": 3})
    assert on_disk() == [0, 1, 2, 3]
    log.write({"event": "step", "step": 4})
    log.write({"event": "eval", "step": 4})
    assert on_disk() == [0, 1, 2, 3, 4, 4]
    log.write({"event": "step", "step": 5})
    log.flush()  # what the training loop does before each checkpoint
    assert on_disk()[-1] == 5
    log.write({"event": "step", "step": 6})
    log.close()
    assert on_disk()[-1] == 6


def test_the_default_run_gets_a_pod_prediction():
    cfg = load_config("default")
    got = predicted_pod_images_per_s(cfg, (28, 28, 1), 10, 10_000)
    assert got is not None
    images_per_s, system = got
    assert system == "POD4" and images_per_s > 0


def test_a_configuration_no_pod_can_run_gets_no_prediction(caplog):
    cfg = load_config("default", ["data.replicas=3"])  # replicas must be a power of two on a POD
    assert predicted_pod_images_per_s(cfg, (28, 28, 1), 10, 10_000) is None
    assert "power of two" in caplog.text


def test_summary_text_frames_every_field():
    text = summary_text({"val_accuracy": 0.81234, "updates": 12, "predicted_pod": None})
    assert "val_accuracy" in text and "0.8123" in text and text.count("=" * 64) == 2


@pytest.mark.parametrize("pod", ["pod16", "pod256"])
def test_recipe_configs_predict_what_the_ipu_presets_predict(pod):
    from ipu.cost.prediction import predict
    from ipu.plan import get_preset, load_profile

    cfg = load_config(f"g16-b4-{pod}")
    images_per_s, system = predicted_pod_images_per_s(cfg, (380, 380, 3), 1000, 1_281_167)
    preset = get_preset(f"g16-b4-{pod}")
    assert system == preset.system
    assert images_per_s == pytest.approx(predict(preset, load_profile(preset)).images_per_s, rel=1e-9)


def _tensorboard_scalars(folder) -> dict[tuple[str, int], float]:
    """Every scalar in the event files under ``folder``: TFRecord framing, tensorboardX's Event proto."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    scalars = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)
            event = Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4  # length, its crc, the record, its crc
            for value in event.summary.value:
                scalars[(value.tag, event.step)] = value.simple_value
    return scalars


def test_metrics_also_go_to_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboardX")
    log = MetricsLog(tmp_path, tensorboard="true")
    for step in range(3):
        log.write({"event": "step", "step": step, "loss": 1.0 / (step + 1), "accuracy": 0.25 * step, "lr": 0.5})
    log.write({"event": "eval", "step": 3, "epoch": 0, "val_loss": 0.25, "val_accuracy": 0.75})
    log.close()
    scalars = _tensorboard_scalars(tmp_path)
    assert scalars[("train/loss", 2)] == pytest.approx(1.0 / 3.0) and scalars[("train/accuracy", 1)] == 0.25
    assert scalars[("train/learning_rate", 0)] == 0.5
    assert (scalars[("validation/loss", 3)], scalars[("validation/accuracy", 3)]) == (0.25, 0.75)


def test_tensorboard_true_without_the_library_names_the_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboardx(name, *args, **kwargs):
        if name.startswith("tensorboardX"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboardx)
    with pytest.raises(ValueError, match=r"pip install 'poprun_py\[tensorboard\]'"):
        MetricsLog(tmp_path, tensorboard="true")
    MetricsLog(tmp_path, tensorboard="auto").close()  # auto: no library, no event files, no error
    assert not list(tmp_path.glob("events.out.tfevents.*"))


def test_tensorboard_points_are_window_means_and_a_partial_window_is_kept(tmp_path):
    pytest.importorskip("tensorboardX")
    log = MetricsLog(tmp_path, tensorboard="true", tensorboard_every=4)
    for step in range(6):
        log.write({"event": "step", "step": step, "loss": float(step), "accuracy": 0.5, "lr": 0.1 * step})
    log.write({"event": "eval", "step": 6, "epoch": 0, "val_loss": 0.25, "val_accuracy": 0.75})
    for step in range(6, 9):
        log.write({"event": "step", "step": step, "loss": 1.0, "accuracy": 1.0, "lr": 1.0})
    log.close()
    scalars = _tensorboard_scalars(tmp_path)
    losses = {s: v for (tag, s), v in scalars.items() if tag == "train/loss"}
    assert losses == {3: 1.5, 5: 4.5, 8: 1.0}  # steps 0-3, then 4-5 cut by the evaluation, then 6-8 at close
    assert scalars[("train/learning_rate", 3)] == pytest.approx(0.3)  # the window's last rate, not its mean
    assert scalars[("validation/accuracy", 6)] == 0.75
    with pytest.raises(ValueError, match="tensorboard_every"):
        MetricsLog(tmp_path, tensorboard="true", tensorboard_every=0)


def test_tensorboard_writer_does_not_import_torch(tmp_path):
    """tensorboardX imports torch whenever it is installed; a run's writer must not (start-up,
    memory, torch's threads in every training process)."""
    pytest.importorskip("tensorboardX")
    code = ("import sys; from launch.train.report import MetricsLog; "
            f"log = MetricsLog({str(tmp_path)!r}, tensorboard='true'); log.close(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert list(tmp_path.glob("events.out.tfevents.*"))
