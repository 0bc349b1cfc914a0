"""The training loop of ``poprun-train``: updates in host calls, metrics, evaluations, checkpoints, the
stop a signal asks for, and the summary at the end of the run."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import poprun_py as popdist
from ipu.runtime.phases import PHASES, PhaseTimes, critical_path, shares
from launch.train import checkpoint as ckpt
from launch.train import run_dir as rundir
from launch.train.build import Training, save_trained_onnx
from launch.train.instruments import finish_records, run_cpu_seconds, write_update_stats
from launch.train.kernel_record import gather_kernel_record
from launch.train.preemption import StopRequest
from launch.train.report import MetricsLog, plot_metrics, predicted_pod, run_end_text
from launch.train.thread_report import gather_thread_report, oversubscribed_hosts
from poprun_py.errors import EXIT_INTERRUPTED, signal_name

logger = logging.getLogger("launch.train")


def resume(t: Training, decision: rundir.Decision) -> bool:
    """Load the checkpoint the run-directory decision names, after checking its weights fit the model."""
    if decision.checkpoint is None:
        if not decision.fresh_dir:
            logger.info("No checkpoint of run %s in %s: starting it from scratch.", t.run_id,
                        ckpt.checkpoint_dir(t.cfg.run.run_dir))
        return False
    arrays, meta = ckpt.load_checkpoint(decision.checkpoint)
    rundir.check_weights(decision.checkpoint, arrays, t.engine.params)
    ckpt.restore_state(t, arrays, meta)
    t.saved_step = t.engine.step
    logger.info("Resumed from %s: update %d, epoch %d, batch %d of the epoch (run %s).", decision.checkpoint,
                t.engine.step, *t.loader.position, t.run_id)
    return True


def run(t: Training, resumed: bool, stop: StopRequest | None = None, comm=None, compiles=None) -> int:
    """The training loop; returns the exit code (0 also when ``stop`` ends it early, after a checkpoint).
    ``compiles``: the run's ``jit.compile_watch.CompileWatch`` (its seconds go into the summary)."""
    lead = t.lead
    if resumed and t.engine.step >= t.total_steps:
        if lead:
            logger.warning("Run %s in %s has done its %d updates already (summary.json holds its result); to train "
                           "on, raise run.epochs or run.max_steps with --resume auto.", t.run_id, t.cfg.run.run_dir,
                           t.total_steps)
        return 0
    log = MetricsLog(t.cfg.run.run_dir, resume_step=t.engine.step, tensorboard=t.cfg.run.tensorboard,
                     tensorboard_every=t.cfg.run.tensorboard_every) if lead else None
    bar = _progress_bar(t, lead)
    try:
        with _logs_around(bar):
            return _loop(t, log, bar, lead, stop, comm, compiles)
    finally:
        if log is not None:  # a run that fails keeps the lines of every update it made
            log.flush()


def _logs_around(bar):
    """Route log records through tqdm while its bar is drawn, so a record never lands on the bar."""
    if bar.disable:
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    return logging_redirect_tqdm()


def _loop(t: Training, log, bar, lead: bool, stop: StopRequest | None, comm, compiles) -> int:
    cfg, e = t.cfg, t.engine
    started, first_step = time.perf_counter(), e.step
    val = (float("nan"), float("nan"))
    tick = time.perf_counter()
    loop = _UpdateTimes()  # the loop's share of the update time: input wait, metrics written
    while e.step < t.total_steps:
        epoch = t.loader.position[0]
        batches = iter(t.loader)
        first = True  # of this epoch: ask every instance afresh (start-up or an evaluation came before)
        while True:
            if stop is not None:  # later: the votes summed by the last update's all-reduce
                signum = stop.agreed(comm) if first else stop.decide(e.agreed_flags)
                if signum:
                    batches.close()
                    return _stopped(t, log, bar, signum)
                e.flags[:] = stop.flags()
            first = False
            begin = time.perf_counter()
            group, waits = _next_host_call(t, batches)  # device_iterations batches, views: nothing copied
            loop.times.add("input_wait", sum(waits))
            if not group:
                loop.seconds += time.perf_counter() - begin
                break
            metrics = e.train_steps([(b.images, b.labels) for b in group])
            now = time.perf_counter()
            per_s = len(group) * t.cfg.global_batch / (now - tick)
            loop.rates += [per_s] * len(group)
            with loop.times.measure("metrics"):
                for batch, m, wait in zip(group, metrics, waits):
                    if lead:
                        log.write({"event": "step", "step": m.step, "epoch": batch.epoch, "loss": m.loss,
                                   "accuracy": m.accuracy, "lr": m.lr, "images_per_s": per_s,
                                   "global_batch": m.samples, "loss_scale": m.loss_scale, "applied": m.applied,
                                   "sync_s": m.sync_s, "compute_s": m.compute_s, "model_s": m.model_s,
                                   "input_wait_s": wait})
                        bar.update(1)
                write_update_stats(t, log)
                if lead:
                    bar.set_postfix(loss=f"{m.loss:.3f}", acc=f"{m.accuracy:.3f}", lr=f"{m.lr:.3g}", refresh=False)
            loop.seconds += time.perf_counter() - begin
            tick = now
            if t.loader.position[0] > epoch or e.step >= t.total_steps:
                break
            if cfg.run.checkpoint_every and e.step % cfg.run.checkpoint_every == 0:
                _save(t, log)
        batches.close()  # stops the loader's producer if the run ends inside an epoch
        val = _end_of_epoch(t, epoch, log)  # evaluate, then checkpoint (a resume never skips an evaluation)
        tick = time.perf_counter()
    bar.close()
    return _finish(t, log, val, time.perf_counter() - started, e.step - first_step, loop, compiles)


@dataclass
class _UpdateTimes:
    """Seconds of the training loop spent on weight updates (from asking the loader for a host call's
    batches to having written their metrics; evaluations and checkpoints excluded), and the phases
    the loop itself measures there."""

    seconds: float = 0.0
    times: PhaseTimes = field(default_factory=PhaseTimes)
    rates: list[float] = field(default_factory=list)  # images/s of each update (its host call's rate)

    def steady_rate(self) -> float:
        """The median images/s of the updates after the first: the rate once the kernels are compiled
        and the loader's queue is full (NaN for a run of one update)."""
        return float(np.median(self.rates[1:])) if len(self.rates) > 1 else float("nan")


def _next_host_call(t: Training, batches) -> tuple[list, list[float]]:
    """Up to ``ipu.device_iterations`` batches of this epoch for one host call, never past the end of
    the run or the next ``run.checkpoint_every`` update (checkpoints fall between host calls), and
    the seconds the loop waited for each (for the last, empty, read of an epoch: in the last entry)."""
    step, every = t.engine.step, t.cfg.run.checkpoint_every
    size = min(t.cfg.ipu.device_iterations, t.total_steps - step)
    if every:
        size = min(size, every - step % every)
    group, waits = [], []
    stats = t.loader.stats
    waited = stats.wait_seconds
    for batch in batches:
        group.append(batch)
        waits.append(stats.wait_seconds - waited)
        waited = stats.wait_seconds
        if len(group) >= size:
            break
    else:
        if waits:
            waits[-1] += stats.wait_seconds - waited
        else:
            waits.append(stats.wait_seconds - waited)
    return group, waits


def _progress_bar(t: Training, lead: bool):
    from tqdm import tqdm

    return tqdm(total=t.total_steps, initial=t.engine.step, disable=not (lead and t.cfg.run.progress_bar),
                unit="update", dynamic_ncols=True, mininterval=1.0, file=sys.stderr)


def _end_of_epoch(t: Training, epoch: int, log: MetricsLog | None) -> tuple[float, float]:
    e = t.engine
    if e.ema is not None and not e.ema_every_step:
        e.ema.update()
    val = (float("nan"), float("nan"))
    if t.eval_loader is not None:
        t.eval_loader.set_position(0, 0)
        loss, acc, count = e.evaluate(t.eval_loader, use_ema=e.ema is not None)
        val = (loss, acc)
        logger.info("Epoch %d (update %d): validation loss %.4f, accuracy %.4f on %d images%s.", epoch, e.step,
                    loss, acc, count, " (EMA weights)" if e.ema is not None else "")
        if log is not None:
            log.write({"event": "eval", "step": e.step, "epoch": epoch, "val_loss": loss, "val_accuracy": acc,
                       "samples": count})
    _save(t, log)
    return val


def _save(t: Training, log: MetricsLog | None) -> None:
    """Gather the state everywhere (collective), write it on instance 0 only, after every metrics
    line so far (a resumed run starts after the checkpoint, so it writes the later ones again)."""
    if log is not None:
        log.flush()
    arrays, meta = ckpt.capture_state(t, {"epoch": t.loader.position[0], "cpu_s": run_cpu_seconds(t)})
    popdist.execute_on_instances({0}, ckpt.save_checkpoint, t.cfg.run.run_dir, t.engine.step, arrays, meta,
                                 keep=t.cfg.run.keep_checkpoints)
    t.saved_step = t.engine.step


def _stopped(t: Training, log: MetricsLog | None, bar, signum: int) -> int:
    """Every instance agreed to stop before this update: checkpoint (collective) and leave.
    SIGUSR1 (a planned stop) exits 0, SIGINT (Ctrl-C) 130."""
    bar.close()
    step = t.engine.step
    code = EXIT_INTERRUPTED if signum == signal.SIGINT else 0
    if step == 0 and signum == signal.SIGINT:  # nothing trained: Ctrl-C leaves no checkpoint of initial weights
        if t.lead:
            logger.warning("%s: stopped before the first update of %d; no checkpoint written (none needed).",
                           signal_name(signum), t.total_steps)
        t.engine.comm.barrier()
        return code
    if t.saved_step != step:  # the cadence, an epoch's end or the resume may have given this update's already
        _save(t, log)
    if t.lead:
        logger.warning("%s: stopped after update %d of %d with a checkpoint in %s; continue with --resume auto.",
                       signal_name(signum), step, t.total_steps, ckpt.checkpoint_dir(t.cfg.run.run_dir))
    if log is not None:
        log.write({"event": "stopped", "step": step, "signal": signal_name(signum)})
        log.close()
    # Every instance leaves together, after instance 0 has written and said everything: a non-zero
    # exit under a bare MPI launcher aborts the job (poprun_py.bootstrap), which must not cut it short.
    t.engine.comm.barrier()
    return code


def _finish(t: Training, log: MetricsLog | None, val: tuple[float, float], seconds: float, steps: int,
            loop: _UpdateTimes, compiles=None) -> int:
    cfg, e = t.cfg, t.engine
    cpu = steps * cfg.global_batch / seconds if seconds > 0 and steps else float("nan")
    plan = t.compiled.plan if t.compiled is not None else None  # None: no IPU-POD runs it (the compile said why)
    pod = predicted_pod(plan, t.compiled.profile or t.model.profile(cfg.data.micro_batch)) \
        if t.lead and plan is not None else None
    threads = gather_thread_report(t.engine.comm)  # collective
    kernels = gather_kernel_record(t.engine.comm)  # collective
    held_out = finish_records(t, log)  # collective: the test split
    phases = e.phase_seconds().seconds
    # collective: each instance's model and all-reduce seconds (the one that waits least is the slowest)
    per_instance = e.comm.allgather(np.array([phases["model"], phases["all_reduce"], loop.seconds]))
    if not t.lead:
        return 0
    for members, count, cpus in oversubscribed_hosts(threads):
        logger.warning("Instances %s share a host of %d CPUs but run up to %d threads at once: oversubscribed "
                       "(set OMP_NUM_THREADS / NUMBA_NUM_THREADS, or let poprun_py place the instances).",
                       members, cpus, count)
    summary = {"event": "summary", "config_model": t.model_label, "updates": e.step, "updates_this_run": steps,
               "global_batch": cfg.global_batch, "replicas": t.placement.num_total_replicas,
               "instances": t.placement.num_instances,
               "val_loss": val[0], "val_accuracy": val[1], **held_out, "wall_s": seconds, "cpu_images_per_s": cpu,
               "steady_images_per_s": loop.steady_rate(), "compile_s": compiles.seconds if compiles else 0.0,
               "predicted_pod_images_per_s": pod[0] if pod else None, "predicted_pod": pod[1] if pod else None,
               "gradient_sync_share": e.sync_seconds / seconds if seconds > 0 else float("nan"),
               "skipped_updates": e.scaler.skipped_steps, "instance_threads": threads, "kernel_wisdom": kernels,
               "instance_model_s": per_instance[:, 0].tolist(), "instance_all_reduce_s": per_instance[:, 1].tolist(),
               "instance_update_s": per_instance[:, 2].tolist(), **_time_shares(e, loop),
               **critical_path(*(per_instance[:, i].tolist() for i in range(3)))}
    log.write(summary)
    if cfg.run.plots:
        plot_metrics(log.records(), cfg.run.run_dir)
    log.close()
    save_trained_onnx(t)
    Path(cfg.run.run_dir, "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(run_end_text(summary, threads, t.placement.num_instances), flush=True)
    return 0


def _time_shares(e, loop: _UpdateTimes) -> dict[str, float]:
    """Instance 0's update time and the share of it each phase took (``ipu.runtime.phases``):
    ``input_wait_share`` is the time it waited for input, ``outside_model_share`` all but the model."""
    times = e.phase_seconds()
    times += loop.times
    out = shares(times.seconds, loop.seconds)
    if not out:
        return {}
    return {"update_s": loop.seconds, "input_wait_share": out["input_wait"], "outside_model_share": out["outside_model"],
            **{f"share_{name}": out[name] for name in (*PHASES, "other")}}
