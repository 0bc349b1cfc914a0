"""A machine's first run says it compiles kernels, once, and the summary tells the steady-state rate apart
from the wall-time one (launch.train.first_compile, jit.compile_watch, launch.train.report)."""

from __future__ import annotations

import json
import subprocess
import sys

import numba
import numpy as np

from jit.compile_watch import CompileWatch
from launch.train.first_compile import notice_text
from launch.train.report import throughput_text
from tests.launch.train.train_runs import ROOT, env

DENSE = ["--config", "dense", "--set", "model.options={hidden: [32]}", "--set", "run.progress_bar=false",
         "--set", "run.plots=false", "--set", "run.tensorboard=false"]


def test_the_watch_sees_the_first_compile_begin_once_and_times_every_compile():
    began = []
    watch = CompileWatch(lambda: began.append(watch.count), counts=lambda dispatcher: True).start()
    default = CompileWatch().start()  # counts only kernels numba keeps on disk (cache=True)
    try:
        @numba.njit(cache=False)
        def twice(x):
            return 2 * x

        twice(np.ones(3))
        twice(np.ones(3))  # the same types: compiled already
        twice(np.ones(3, np.int64))  # new types: compiled again, no second notice
    finally:
        watch.stop()
        default.stop()
    assert began == [0] and watch.count == 2 and watch.seconds > 0
    assert default.count == 0 and default.seconds == 0.0


def test_the_notice_is_one_line_with_the_time_it_takes_about():
    assert notice_text("dense-mnist") == (
        "Compiling kernels for this CPU (first run only, about 10 s): numba keeps them in its cache, so later "
        "runs start at once; the summary's steady-state rate leaves this time out.")
    assert "about 90 s" in notice_text("efficientnet-tiny")


def test_the_summary_gives_the_wall_time_rate_the_compile_time_and_the_steady_rate():
    summary = {"cpu_images_per_s": 612.7, "steady_images_per_s": 1062.04, "compile_s": 87.4}
    assert throughput_text(summary) == ("612.7 images/s over the wall time (87 s of it compiling kernels, a first "
                                        "run on this CPU), 1,062.0 images/s in the steady state (median update "
                                        "after the first)")
    warm = {"cpu_images_per_s": 1001.0, "steady_images_per_s": 1050.0, "compile_s": 0.0}
    assert throughput_text(warm) == ("1,001.0 images/s over the wall time, 1,050.0 images/s in the steady state "
                                     "(median update after the first)")


def test_a_cold_numba_cache_gets_the_notice_on_the_first_run_only(tmp_path):
    """Two runs with an empty NUMBA_CACHE_DIR of their own: the first compiles and says so; the second
    loads every kernel from the cache and says nothing."""
    outputs = []
    for n in (1, 2):
        cmd = [sys.executable, "-m", "launch.train", *DENSE, "--set", "run.max_steps=5",
               "--set", f"run.run_dir={tmp_path / f'run{n}'}"]
        done = subprocess.run(cmd, cwd=ROOT, env=env(NUMBA_CACHE_DIR=str(tmp_path / "numba")), capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads((tmp_path / f"run{n}" / "summary.json").read_text())
        outputs.append((done.stderr.count("Compiling kernels for this CPU (first run only, about 10 s)"),
                        summary["compile_s"] > 0.5, summary["steady_images_per_s"] > summary["cpu_images_per_s"]))
    assert outputs == [(1, True, True), (0, False, True)]
