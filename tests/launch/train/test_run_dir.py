"""The run directory's rules (launch.train.run_dir), as pure decisions on real files: numbered folders,
which run a resume continues, what it refuses, and which checkpoints retention may delete."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest

from launch.train import checkpoint as ckpt
from launch.train import run_dir as rundir
from launch.train.config_file import load_config
from launch.train.preemption import StopRequest


def config(run_dir, **changes) -> dict:
    cfg = load_config("dense", [f"run.run_dir={run_dir}", *(f"{k}={v}" for k, v in changes.items())])
    return cfg.to_dict()


def write_run(folder, cfg: dict, run_id: str, steps=(), launcher_run_id: str = "", started: float = 0.0) -> None:
    """A run's files as training leaves them: identity.json and checkpoints that name the run."""
    rundir.write_identity(folder, {"run_id": run_id, "config": cfg, "started": started,
                                   "launcher_run_id": launcher_run_id})
    for step in steps:
        ckpt.save_checkpoint(folder, step, {"model/w": np.zeros((2, 3), np.float32)},
                             {"config": cfg, "run_id": run_id}, keep=10)


def test_numbered_folders_count_up_from_one_and_each_fresh_run_gets_its_own(tmp_path):
    template = str(tmp_path / "runs" / "{n}")
    first = rundir.decide(config(template), "none")
    second = rundir.decide(config(template), "none")
    assert (first.run_dir, second.run_dir) == (str(tmp_path / "runs" / "1"), str(tmp_path / "runs" / "2"))
    assert first.run_id != second.run_id and first.checkpoint is None and first.fresh_dir
    (tmp_path / "runs" / "7").mkdir()
    (tmp_path / "runs" / "notes").mkdir()  # not a number: not one of the template's folders
    assert rundir.decide(config(template), "none").run_dir == str(tmp_path / "runs" / "8")
    assert [p.name for p in rundir.template_matches(template)] == ["1", "2", "7", "8"]


def test_a_time_template_and_placeholders_outside_the_last_name(tmp_path):
    now = 1_800_000_000.0
    stamp = rundir.time.strftime(rundir.TIME_FORMAT, rundir.time.localtime(now))
    assert rundir.claim_new(str(tmp_path / "r-{time}"), now) == tmp_path / f"r-{stamp}"
    with pytest.raises(rundir.RunDirError, match=r"exists already \(two runs started in the same second\); add \{n\}"):
        rundir.claim_new(str(tmp_path / "r-{time}"), now)
    assert rundir.claim_new(str(tmp_path / "{time}-{n}"), now) == tmp_path / f"{stamp}-1"
    with pytest.raises(rundir.RunDirError, match=r"put \{n\} or \{time\} in the last folder name only"):
        rundir.decide(config("runs/{n}/x"), "none")


def test_a_fresh_run_refuses_a_folder_holding_another_run_and_names_both_ways_out(tmp_path):
    folder = tmp_path / "mix"
    write_run(folder, config(folder), "run-a", steps=(20, 40))
    with pytest.raises(rundir.RunDirError) as err:
        rundir.decide(config(folder), "none")
    text = str(err.value)
    assert f"run.run_dir {folder} holds run run-a, newest checkpoint ckpt-00000040.h5" in text
    assert "--resume auto" in text and f"run.run_dir={folder}/{{n}}" in text and "\n" not in text
    legacy = tmp_path / "old"  # written before identity.json: its metrics alone mark it
    legacy.mkdir()
    (legacy / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(rundir.RunDirError, match="holds another run's files"):
        rundir.decide(config(legacy), "none")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "memory.png").write_bytes(b"")  # the compile step's plot is not a run
    assert rundir.decide(config(empty), "none").run_dir == str(empty)


def test_resume_refuses_another_configuration_naming_the_file_and_the_keys(tmp_path):
    folder = tmp_path / "mix"
    write_run(folder, config(folder, **{"schedule.base_lr": 0.05}), "run-a", steps=(20,))
    with pytest.raises(rundir.RunDirError) as err:
        rundir.decide(config(folder, **{"schedule.base_lr": 0.01, "optim.momentum": 0.5}), "auto")
    text = str(err.value)
    assert text.startswith(f"{folder / 'identity.json'} belongs to a run with another configuration")
    assert "optim.momentum: 0.9 -> 0.5; schedule.base_lr: 0.05 -> 0.01" in text
    path = ckpt.checkpoint_path(folder, 20)
    with pytest.raises(rundir.RunDirError, match=rf"^{path} belongs to a run with another configuration "
                                                 r"\(schedule\.base_lr: 0\.05 -> 0\.01\)"):
        rundir.decide(config(tmp_path / "elsewhere", **{"schedule.base_lr": 0.01}), str(path))
    # what a resume may change: its length, logging, checkpoints, the IPU fit and prediction settings
    longer = config(folder, **{"schedule.base_lr": 0.05, "run.epochs": 9, "run.max_steps": 70,
                               "run.checkpoint_every": 3, "ipu.device_iterations": 4, "run.tensorboard": "false"})
    decision = rundir.decide(longer, "auto")
    assert (decision.run_dir, decision.run_id, decision.checkpoint) == (str(folder), "run-a", str(path))


def test_resume_auto_continues_the_newest_run_of_a_template_or_the_restarted_jobs_own(tmp_path):
    template = str(tmp_path / "runs" / "{n}")
    for n, (launcher, started) in enumerate([("job-1", 10.0), ("job-2", 30.0), ("job-3", 20.0)], start=1):
        write_run(tmp_path / "runs" / str(n), config(template), f"run-{n}", steps=(5 * n,),
                  launcher_run_id=launcher, started=started)
    assert rundir.decide(config(template), "auto").run_id == "run-2"  # the most recently started
    own = rundir.decide(config(template), "auto", launcher_run_id="job-3", restart=True)
    assert (own.run_id, own.checkpoint) == ("run-3", str(ckpt.checkpoint_path(tmp_path / "runs" / "3", 15)))
    # a restart whose first attempt never began a run: a new folder, not somebody else's run
    assert rundir.decide(config(template), "auto", launcher_run_id="job-9", restart=True).run_dir.endswith("4")
    assert rundir.decide(config(tmp_path / "none-yet" / "{n}"), "auto").checkpoint is None


def test_a_restart_does_not_take_over_a_plain_folder_its_job_did_not_start(tmp_path):
    folder = tmp_path / "mix"
    write_run(folder, config(folder), "run-a", steps=(20,), launcher_run_id="job-1")
    with pytest.raises(rundir.RunDirError, match="which this launcher job did not start"):
        rundir.decide(config(folder), "auto", launcher_run_id="job-2", restart=True)
    assert rundir.decide(config(folder), "auto", launcher_run_id="job-1", restart=True).run_id == "run-a"


def test_the_run_that_continues_removes_a_checkpoint_left_half_written(tmp_path):
    """A job stopped for good while instance 0 wrote a checkpoint (its host lost, and no host left to go
    on with: bench/chaos_hosts.py) leaves ``ckpt-....h5.tmp``. The run that continues in the folder (a
    restart, or --resume auto) removes it, holding the folder's lock, and resumes from the last whole one;
    other files are not its own."""
    folder = tmp_path / "run"
    cfg = config(folder)
    write_run(folder, cfg, "run-a", steps=(2,))
    partial = ckpt.checkpoint_dir(folder) / "ckpt-00000004.h5.tmp"
    partial.write_bytes(b"\x89HDF, cut short")
    notes = ckpt.checkpoint_dir(folder) / "notes.tmp"
    notes.write_text("not a checkpoint")
    assert rundir.holds_run(folder)
    decision = rundir.decide(cfg, "auto")
    assert decision.checkpoint == str(ckpt.checkpoint_path(folder, 2)) and decision.run_id == "run-a"
    assert not partial.exists() and notes.exists()


def test_retention_and_resume_see_only_the_runs_own_checkpoints(tmp_path):
    folder = tmp_path / "r"
    foreign = {"config": config(folder), "run_id": "other"}
    ckpt.save_checkpoint(folder, 90, {"model/w": np.zeros(2, np.float32)}, foreign, keep=5)
    for step in (10, 20, 30):
        ckpt.save_checkpoint(folder, step, {"model/w": np.zeros(2, np.float32)},
                             {"config": config(folder), "run_id": "mine"}, keep=2)
    names = [p.name for p in ckpt.list_checkpoints(ckpt.checkpoint_dir(folder))]
    assert names == ["ckpt-00000020.h5", "ckpt-00000030.h5", "ckpt-00000090.h5"]  # 10 pruned, 90 untouched
    assert ckpt.find_latest(folder, run_id="mine").name == "ckpt-00000030.h5"
    assert ckpt.find_latest(folder).name == "ckpt-00000090.h5"


def test_weights_of_another_model_are_refused_naming_the_file_and_the_weights(tmp_path):
    class P:
        def __init__(self, name, shape):
            self.name, self.data = name, np.zeros(shape, np.float32)

    arrays = {"model/fc1.w": np.zeros((128, 784), np.float32), "model/fc1.b": np.zeros(128, np.float32)}
    with pytest.raises(rundir.RunDirError, match=r"checkpoint c\.h5 holds weights of another model \(fc1\.b: \(128,\) "
                                                 r"-> \(64,\); fc1\.w: \(128, 784\) -> \(64, 784\)\)"):
        rundir.check_weights("c.h5", arrays, [P("fc1.w", (64, 784)), P("fc1.b", (64,))])
    rundir.check_weights("c.h5", arrays, [P("fc1.w", (128, 784)), P("fc1.b", (128,))])


def test_identity_records_the_run_and_each_resume(tmp_path):
    decision = rundir.Decision(str(tmp_path / "r"), "run-a", None, True)
    cfg = config(tmp_path / "r")

    class P:
        name, data = "w", np.zeros((2, 3), np.float32)

    rundir.record_identity(decision, cfg, [P()], launcher_run_id="job-1", command=["poprun-train"], now=5.0)
    later = rundir.Decision(decision.run_dir, "run-a", "ckpt.h5", False)
    rundir.record_identity(later, cfg, [P()], launcher_run_id="job-2", now=9.0)
    record = json.loads((tmp_path / "r" / "identity.json").read_text())
    assert record["run_id"] == "run-a" and record["started"] == 5.0 and record["params"] == [["w", [2, 3], "float32"]]
    assert record["launcher_run_id"] == "job-2" and record["resumes"][0]["checkpoint"] == "ckpt.h5"


def test_ctrl_c_is_recorded_once_and_a_second_one_interrupts_at_once():
    stop = StopRequest()
    previous = signal.getsignal(signal.SIGINT)
    try:
        stop.install((signal.SIGINT,))
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum == signal.SIGINT
        assert StopRequest.decide(stop.flags()) == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes of the main thread
                pass
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_into(folder: str, barrier, results) -> None:
    """One job's start, as instance 0 makes it: decide, then write the run's first file (identity.json)."""
    cfg = config(folder)
    barrier.wait()
    try:
        decision = rundir.decide(cfg, "none")
    except rundir.RunDirError as err:
        results.put(("refused", str(err)))
        return
    rundir.record_identity(decision, cfg, [], command=["poprun-train"])
    results.put(("ran", decision.run_id))


def test_of_two_starts_into_one_plain_folder_at_once_exactly_one_runs(tmp_path):
    """Two processes released together by a barrier into the same run.run_dir, 24 times: each time one
    takes the folder and the other is refused with the one-line message, whichever came second."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    results = context.Queue()
    for pair in range(24):
        folder = str(tmp_path / f"same-{pair}")
        barrier = context.Barrier(2)
        jobs = [context.Process(target=_start_into, args=(folder, barrier, results)) for _ in range(2)]
        for job in jobs:
            job.start()
        outcomes = sorted(results.get(timeout=60) for _ in jobs)
        for job in jobs:
            job.join(60)
        assert [kind for kind, _ in outcomes] == ["ran", "refused"], (pair, outcomes)
        winner, message = outcomes[0][1], outcomes[1][1]
        assert message.startswith(f"run.run_dir {folder} ") and "\n" not in message
        assert f"holds run {winner}" in message or f"is in use by run {winner}, running now" in message \
            or "is in use by run starting now" in message, message
        assert json.loads((tmp_path / f"same-{pair}" / "identity.json").read_text())["run_id"] == winner


def test_a_folder_in_use_by_a_running_run_is_refused_and_free_again_when_it_ends(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "busy"
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from launch.train import run_lock; "
                               f"run_lock.acquire({str(folder)!r}); run_lock.record({str(folder)!r}, 'run-a'); "
                               "print('held', flush=True); "
                               "sys.stdin.readline()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=rundir.Path(__file__).resolve().parents[3])
    try:
        assert holder.stdout.readline() == "held\n"  # the lock is taken: nothing written into the folder yet
        with pytest.raises(rundir.RunDirError, match=rf"^run.run_dir {folder} is in use by run run-a, running now: "
                                                     r"this run would mix its files with it\. .*--resume auto once"):
            rundir.decide(config(folder), "none")
        with pytest.raises(rundir.RunDirError, match="is in use by run run-a, running now"):
            rundir.decide(config(folder), "auto")
    finally:
        holder.communicate("\n", timeout=30)
    assert rundir.decide(config(folder), "none").run_dir == str(folder)  # it ended: the kernel gave the lock back
