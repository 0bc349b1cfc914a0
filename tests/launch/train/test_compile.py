"""The compile step before the first step: the run's IpuPlan, the memory fit and report, IO tiles.

A program that does not fit stops every instance with Poplar's words before step 0; a shape no
IPU-POD could run is refused unless ``ipu.check_fit`` is off, which logs why there is no check.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ipu.cost.prediction import predict
from ipu.memory import IpuOutOfMemoryError
from launch.train.build import compile_ipu
from launch.train.config_file import load_config
from launch.train.plan import ipu_plan
from launch.train.report import predicted_pod
from models import build_model
from tests.launch.train.train_runs import env

ROOT = Path(__file__).resolve().parents[3]

INFO = SimpleNamespace(image_shape=(28, 28, 1), num_classes=10, num_samples=10_000)
# efficientnet-tiny at 28 px, micro-batch 2048 on a Mk1 (256 KiB a tile): the stash does not fit
TOO_BIG = ["--set", "data.micro_batch=2048", "--set", "ipu.chip=mk1", "--set", "data.replicas=2",
           "--set", "run.progress_bar=false", "--set", "run.evaluate=false"]


def compiled(overrides, lead=False):
    cfg = load_config("default", ["run.plots=false", *overrides])
    model = build_model(cfg.model.name, 10, in_channels=1, resolution=28, **cfg.model.kwargs)
    return compile_ipu(cfg, model, INFO, lead=lead)


def test_the_default_run_fits_and_logs_its_memory_report(caplog):
    with caplog.at_level(logging.INFO, logger="launch.train.build"), caplog.at_level(logging.INFO, logger="ipu.compile"):
        c = compiled([])
    assert c.memory.fits and c.plan.system == "POD4" and c.plan.micro_batch == 16
    assert "Memory per IPU" in caplog.text and "stash" in caplog.text and "peak tile" in caplog.text
    assert "No IO tiles (ipu.num_io_tiles=0): host transfer does not overlap compute" in caplog.text


def test_the_plan_follows_the_config():
    cfg = load_config("default", ["ipu.num_io_tiles=32", "ipu.prefetch_micro_batches=2", "ipu.device_iterations=4",
                                  "ipu.chip=mk1", "optim.name=adam"])
    plan = ipu_plan(cfg, (28, 28, 1), 10, 10_000)
    assert (plan.num_io_tiles, plan.prefetch_micro_batches, plan.device_iterations, plan.chip) == (32, 2, 4, "mk1")
    assert plan.optimizer == "adam" and plan.eight_bit_io and plan.replicas == 4 and plan.image_size == 28


def test_a_program_that_does_not_fit_raises_poplars_error_naming_the_fix():
    with pytest.raises(IpuOutOfMemoryError, match=r"Out of memory on tile \d+ of IPU 0: .* over; .*Largest "
                                                  r"consumers on IPU 0: .*smaller micro-batch \(now 2048\).*"
                                                  r"data\.micro_batch"):
        compiled(TOO_BIG[1::2][:3])


def test_a_shape_no_pod_runs_is_refused_unless_the_fit_check_is_off(caplog):
    with pytest.raises(ValueError, match=r"power of two.*--set ipu\.check_fit=false"):
        compiled(["data.replicas=3"])
    with caplog.at_level(logging.INFO, logger="launch.train.build"):
        c = compiled(["data.replicas=3", "ipu.check_fit=false"])
    assert c.plan is None and c.memory is None and not c.io.overlap
    assert "No memory fit check: ipu.check_fit is false (and no IPU-POD could run this shape" in caplog.text



def test_the_compiled_plan_and_profile_are_what_the_run_predicts_at_its_end():
    """The end of a run costs the plan it compiled, with the profile it was placed with: nothing is rebuilt."""
    c = compiled([])
    assert c.profile and c.plan == ipu_plan(load_config("default", ["run.plots=false"]), (28, 28, 1), 10, 10_000)
    assert predicted_pod(c.plan, c.profile) == (predict(c.plan, list(c.profile)).images_per_s, "POD4")
    unchecked = compiled(["ipu.check_fit=false"])  # no fit, but a plan an IPU-POD can run: still predicted
    assert unchecked.memory is None and unchecked.plan == c.plan and unchecked.profile == ()

@pytest.mark.parametrize("schedule,ipus,warned", [("interleaved", 2, True), ("grouped", 2, False),
                                                  ("interleaved", 1, False)])
def test_io_tiles_warn_once_when_they_cannot_overlap(caplog, schedule, ipus, warned):
    overrides = ["ipu.num_io_tiles=32", f"ipu.pipeline_schedule={schedule}", f"ipu.ipus_per_replica={ipus}"]
    if ipus > 1:
        overrides += ["ipu.pipeline_splits=[block4a]", "data.grad_accum=4"]
    with caplog.at_level(logging.INFO):
        c = compiled(overrides)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "will not overlap host IO" in r.message]
    assert len(warnings) == (1 if warned else 0) and c.io.overlap is not warned
    assert c.io.num_io_tiles == 32 and c.io.compute_tiles == 1440
    assert f"host transfer {'does NOT overlap' if warned else 'overlaps'} compute" in caplog.text


def test_out_of_memory_stops_the_training_command_before_step_0(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "launch.train", *TOO_BIG, "--set", f"run.run_dir={tmp_path}"],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "IpuOutOfMemoryError: Out of memory on tile" in proc.stderr and "of IPU 0" in proc.stderr
    assert "Training efficientnet-tiny" not in proc.stderr and not (tmp_path / "metrics.jsonl").exists()
    assert (tmp_path / "memory.png").stat().st_size > 1000  # the report is written for the failed compile too


def test_out_of_memory_stops_every_instance_under_the_launcher(tmp_path):
    cmd = [sys.executable, "-m", "poprun_py", "--num-instances", "2", "--num-replicas", "2", sys.executable, "-m",
           "launch.train", *TOO_BIG, "--set", "run.plots=false", "--set", f"run.run_dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    failed = re.search(r"poprun_py: instance (\d) of 2 failed .*: exit code 2", out)
    assert failed, out[-2000:]
    # each instance compiles and checks the fit on its own, to the same error: the first to fail is named, the
    # error is on the screen once (the same line from the other instance is not shown again, and the report
    # points to it instead of repeating it)
    assert len(re.findall(r"\[[01]/2\] ERROR launch.train: IpuOutOfMemoryError: Out of memory on tile", out)) == 1, out
    assert "its error: in the output above" in out.split(failed.group(0))[1]
    assert not (tmp_path / "metrics.jsonl").exists()
