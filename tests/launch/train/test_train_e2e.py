"""The training command end to end, through the real launcher where it matters.

* topology invariance: 1 x 4, 2 x 2 and 4 x 1 (instances x local replicas) give the same losses and final state, bitwise;
* SIGKILL + ``--resume auto`` ends with bitwise the same weights as an uninterrupted run;
* ``poprun_py --max-restarts 1`` restarts a crashed job from its last checkpoint by itself;
* config errors reach the user with the key named.

Small shapes keep this under a minute or so on two busy cores; threads are pinned to one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from launch.train import checkpoint as ckpt
from tests.launch.train.train_runs import DENSE, KILL_AFTER_45, ROOT, env, evaluations, final_state, losses, ok, train

# A tiny EfficientNet with batch norm (replica-local statistics), dropout, drop-connect, mixup and
# cutmix: everything whose randomness or state could depend on the instance split.
TOPOLOGY = ["--config", "default", "--set", "model.name=efficientnet-tiny",
            "--set", "model.options={width: 0.1, depth: 0.1, resolution: 16, dropout: 0.2, drop_connect: 0.2}",
            "--set", "data.micro_batch=4", "--set", "data.grad_accum=2", "--set", "data.replicas=4",
            "--set", "data.augment=true", "--set", "data.mixup_alpha=0.2", "--set", "data.cutmix_lambda=0.85",
            "--set", "run.max_steps=20", "--set", "run.evaluate=false", "--set", "run.plots=false",
            "--set", "run.checksum_every=5", "--set", "run.progress_bar=false", "--set", "ipu.prefetch_micro_batches=0",
            "--set", "schedule.warmup_epochs=0", "--set", "schedule.warmup_steps=5"]


def test_losses_do_not_depend_on_how_replicas_are_split_over_instances(tmp_path):
    runs = {}
    for instances in (1, 2, 4):
        run_dir = tmp_path / f"{instances}x{4 // instances}"
        ok(train(TOPOLOGY, run_dir, instances=instances))
        runs[instances] = (losses(run_dir), final_state(run_dir))
    base, base_state = runs[1]
    assert len(base) == 20 and np.all(np.isfinite(base))
    summary = json.loads((tmp_path / "4x1" / "summary.json").read_text())  # every instance's own seconds
    assert len(summary["instance_all_reduce_s"]) == 4 and all(s >= 0.0 for s in summary["instance_all_reduce_s"])
    assert all(0.0 < m < u for m, u in zip(summary["instance_model_s"], summary["instance_update_s"]))
    j = summary["critical_instance"]  # the one that waits least in the all-reduce
    assert summary["instance_all_reduce_s"][j] == min(summary["instance_all_reduce_s"])
    assert summary["instance_wait_share"][j] == 0.0 and min(summary["instance_wait_share"]) >= 0.0
    assert 0.0 < summary["critical_outside_model_share"] < 1.0
    for instances in (2, 4):
        got, state = runs[instances]
        np.testing.assert_array_equal(got, base, err_msg=f"{instances} instances: the losses")
        assert set(state) == set(base_state)
        for key in base_state:  # the replicas' batch-norm statistics travel with them
            np.testing.assert_array_equal(state[key], base_state[key], err_msg=f"{instances} instances: {key}")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: one instance with 2 threads")
def test_one_instance_with_two_threads_trains_bitwise_like_two_with_one(tmp_path):
    """poprun_py gives an instance one thread per CPU it owns: on 2 CPUs, 1 x 4 computes with 2
    threads and 2 x 2 with 1 each; no split of the work may depend on that (models/kernels/gemm.py)."""
    args = [*TOPOLOGY, "--set", "run.max_steps=6", "--set", "data.augment=false", "--set", "ipu.prefetch_micro_batches=1"]
    free = {k: v for k, v in env().items() if not k.endswith("_NUM_THREADS")}  # the launcher decides
    states = []
    for instances in (1, 2):
        run_dir = tmp_path / f"{instances}x{4 // instances}"
        cmd = [sys.executable, "-m", "poprun_py", "--num-instances", str(instances), "--num-replicas", "4",
               sys.executable, "-m", "launch.train", *args, "--set", f"run.run_dir={run_dir}"]
        ok(subprocess.run(cmd, cwd=ROOT, env=free, capture_output=True, text=True, timeout=240))
        states.append(final_state(run_dir, 6))
    threads = [json.loads((tmp_path / d / "summary.json").read_text())["instance_threads"] for d in ("1x4", "2x2")]
    assert [t["numba"] for t in threads[0]] == [2] and [t["numba"] for t in threads[1]] == [1, 1]
    for key in states[0]:
        if key.startswith(("model/", "optim/")):
            np.testing.assert_array_equal(states[1][key], states[0][key], err_msg=key)


def test_measured_kernel_choices_are_shared_by_the_instances_and_kept_for_later_runs(tmp_path):
    """With kernel wisdom on: 2 x 2 started first measures every shape (both instances at once, under the
    file's lock), 1 x 4 then reads the choices; the weights agree bitwise and the record names the choices."""
    args = [*TOPOLOGY, "--set", "run.max_steps=4", "--set", "data.augment=false"]
    states, records = [], []
    for instances in (2, 1):
        run_dir = tmp_path / f"{instances}x{4 // instances}"
        ok(train(args, run_dir, instances=instances, POPRUN_WISDOM=str(tmp_path / "wisdom.json")))
        states.append(final_state(run_dir, 4))
        records.append(json.loads((run_dir / "summary.json").read_text())["kernel_wisdom"])
    assert records[0]["choices"] and records[0]["choices"] == records[1]["choices"]
    assert records[0]["instances_agree"] and records[0]["file"] == str(tmp_path / "wisdom.json")
    machines = json.loads((tmp_path / "wisdom.json").read_text())["machines"]
    assert set(machines[records[0]["machine"]]) == set(records[0]["choices"])
    for key in states[0]:
        if key.startswith(("model/", "optim/")):
            np.testing.assert_array_equal(states[1][key], states[0][key], err_msg=key)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    ok(train(DENSE, run_dir))
    return run_dir


def test_sigkill_and_resume_end_with_bitwise_the_same_weights(uninterrupted, tmp_path):
    killed = train(DENSE, tmp_path, fault=KILL_AFTER_45)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert ckpt.find_latest(tmp_path).name == "ckpt-00000045.h5"
    resumed = train([*DENSE, "--resume", "auto"], tmp_path)
    ok(resumed)
    assert "Resumed from" in resumed.stderr
    want, got = final_state(uninterrupted, 50), final_state(tmp_path, 50)
    assert set(got) == set(want) and any(k.startswith("ema/") for k in got) and any(k.startswith("optim/") for k in got)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    np.testing.assert_array_equal(losses(tmp_path), losses(uninterrupted))
    assert evaluations(tmp_path) == evaluations(uninterrupted) and len(evaluations(tmp_path)) == 2


def test_launcher_restarts_a_crashed_job_from_its_checkpoint(uninterrupted, tmp_path):
    # the restart (POPRUN_RESTART_COUNT=1) is not hit again
    proc = train(DENSE, tmp_path, instances=2, launcher=["--max-restarts", "1"], fault="instance=0,at=step 21")
    ok(proc)
    assert f"from {tmp_path}/checkpoints/ckpt-00000020.h5: update 20" in proc.stderr + proc.stdout
    want, got = final_state(uninterrupted, 50), final_state(tmp_path, 50)
    for key in want:  # 2 instances sum gradients in another order than 1: equal to float32 rounding
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_config_error_names_the_key_on_the_command_line(tmp_path):
    proc = train(["--set", "optim.momentun=0.9"], tmp_path)
    assert proc.returncode != 0
    assert "optim.momentun: unknown key; did you mean optim.momentum?; valid keys of optim are name, momentum" \
        in proc.stderr


def test_pipelined_replicas_train_like_single_ipu_replicas(tmp_path):
    short = [*DENSE, "--set", "run.max_steps=6", "--set", "data.grad_accum=4", "--set", "ema.decay=0",
             "--set", "schedule.warmup_steps=2", "--set", "data.micro_batch=8", "--set", "run.evaluate=false"]
    ok(train(short, tmp_path / "single"))
    ok(train([*short, "--set", "ipu.ipus_per_replica=2", "--set", "ipu.pipeline_splits=[fc2]"], tmp_path / "piped"))
    np.testing.assert_allclose(losses(tmp_path / "piped"), losses(tmp_path / "single"), rtol=1e-6)


def test_a_non_finite_loss_stops_the_run_naming_the_update(tmp_path):
    proc = train([*DENSE, "--set", "loss_scaling.initial_scale=1", "--set", "schedule.kind=constant",
                  "--set", "schedule.base_lr=1e30"], tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "NonFiniteLossError: non-finite loss or gradient at weight update" in proc.stderr
    assert ckpt.find_latest(tmp_path) is None or ckpt.step_of(ckpt.find_latest(tmp_path)) < 20


def test_device_iterations_train_bitwise_like_one_update_per_host_call(uninterrupted, tmp_path):
    # 8 updates a host call, cut to 5 by run.checkpoint_every and at the epoch end (39 updates)
    ok(train([*DENSE, "--set", "ipu.device_iterations=8"], tmp_path))
    np.testing.assert_array_equal(losses(tmp_path), losses(uninterrupted))
    want, got = final_state(uninterrupted, 50), final_state(tmp_path, 50)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert evaluations(tmp_path) == evaluations(uninterrupted)


def test_the_summary_says_where_the_update_time_went(uninterrupted):
    summary = json.loads((uninterrupted / "summary.json").read_text())
    phases = ("input_wait", "normalise", "model", "gradient_sum", "all_reduce", "optimizer", "precision_emulation",
              "metrics", "other")
    shares = [summary[f"share_{p}"] for p in phases]
    assert all(0.0 <= s <= 1.0 for s in shares) and sum(shares) == pytest.approx(1.0)
    assert summary["share_model"] > 0.0 and summary["share_precision_emulation"] == 0.0
    assert summary["outside_model_share"] == pytest.approx(1.0 - summary["share_model"])
    assert summary["input_wait_share"] == summary["share_input_wait"] and summary["update_s"] > 0.0
    steps = [r for r in map(json.loads, (uninterrupted / "metrics.jsonl").read_text().splitlines())
             if r["event"] == "step"]
    assert all(r["input_wait_s"] >= 0.0 for r in steps)
    # update by update: the model's seconds are part of the replicas' compute, within the update's wall time
    assert all(0.0 < r["model_s"] <= r["compute_s"] < r["global_batch"] / r["images_per_s"] for r in steps)


def test_sigusr1_stops_with_a_checkpoint_and_the_run_resumes_bitwise(uninterrupted, tmp_path):
    cmd = [sys.executable, "-m", "launch.train", *DENSE, "--set", f"run.run_dir={tmp_path}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "metrics.jsonl"
    for line in proc.stderr:  # checkpoints every 5 updates: stop in the middle of the run
        if "Checkpoint for update 5 written" in line:
            break
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    stopped = [json.loads(x) for x in metrics.read_text().splitlines() if '"stopped"' in x]
    assert len(stopped) == 1 and stopped[0]["signal"] == "SIGUSR1", err[-2000:]
    step = stopped[0]["step"]
    assert 5 <= step < 50 and ckpt.step_of(ckpt.find_latest(tmp_path)) == step
    assert f"SIGUSR1: stopped after update {step} of 50" in err
    ok(train([*DENSE, "--resume", "auto"], tmp_path))
    np.testing.assert_array_equal(losses(tmp_path), losses(uninterrupted))
    want, got = final_state(uninterrupted, 50), final_state(tmp_path, 50)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
