"""The data-parallel training engine: local replicas, one fused all-reduce, one optimizer step.

One host call (``Engine.train_steps``) runs ``device_iterations`` weight updates: the host loads
each local replica's ``ReplicaFeed`` (uint8 views into the loader's batches, which the loader's
thread prefetched: see ``ipu.runtime.streams``) and the per-step metrics come back, in order, at the
end of the call. ``train_step`` is the one-update call. Each
weight update:

1. every local replica reads its gradient-accumulation micro-batches from its infeed and adds
   the gradients of ``loss_scale * mean micro-batch loss`` into ONE preallocated flat buffer (float64 by default,
   so that the order of the sum cannot change the result; views per parameter), so local replicas
   are summed in-process;
2. one ``comm.allreduce`` (sum) across instances (:meth:`Engine.sync_gradients`) of the flat
   buffer with the step's metrics (loss sum, correct, count) and the host's flags (``flags``, e.g.
   a stop request) appended: one collective, so one point where instances wait for each other
   per update (with a float32 buffer the metrics and flags take a second, float64 all-reduce);
3. one pass ``grads = flat / (total_replicas * A * loss_scale)`` writes the mean over every
   micro-batch of every replica, unscaled, into the model's gradients (``flat`` keeps the sum);
   the loss scaler judges the step (non-finite:
   stop naming the update, or with dynamic scaling skip it and lower the scale), the same
   verdict on every instance since the gradients and the loss are the same everywhere;
4. the same optimizer step, with the schedule's learning rate, on every instance (and the EMA).

At start the weights and buffers are broadcast from instance 0. Every ``checksum_every``
updates a float64 digest of the weights is all-gathered and compared; a mismatch raises
:class:`WeightDivergenceError` naming the instances that differ from instance 0.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ipu.runtime.emulation import PrecisionEmulation
from ipu.runtime.phases import PhaseTimes
from ipu.runtime.replica import Replica, ReplicaResult
from ipu.runtime.streams import ReplicaFeed
from models.optim.loss_scaling import LossScaler, NonFiniteLossError
from models.param import generation, span
from poprun_py.progress import report_progress

logger = logging.getLogger(__name__)


_COUNTS = 2  # after the replicas' loss sums in the all-reduce: correct top-1, sample count


class WeightDivergenceError(RuntimeError):
    """Instances hold different weights: a bug, a non-deterministic kernel or corrupted memory."""


@dataclass(frozen=True)
class StepMetrics:
    """One weight update, reduced over every replica of every instance."""

    step: int  # 0-based index of this update
    loss: float  # mean (unscaled) training loss over the global batch
    accuracy: float  # top-1 against the un-mixed labels
    lr: float
    applied: bool  # False when dynamic loss scaling skipped the update
    loss_scale: float
    samples: int  # global batch
    compute_s: float  # local replicas' forward/backward
    model_s: float  # of which the model itself (the "model" phase of this instance's replicas)
    sync_s: float  # the gradient all-reduce
    update_s: float  # mean + unscale, checks, optimizer, EMA


def _metrics(values: dict[str, float]) -> StepMetrics:
    """One device iteration's metrics (as floats) into typed ``StepMetrics``."""
    values = {k: float(v) for k, v in values.items()}
    ints = {"step": int(values["step"]), "samples": int(values["samples"]), "applied": bool(values["applied"])}
    return StepMetrics(**{**values, **ints})


def flat_views(params, flat: np.ndarray) -> list[np.ndarray]:
    """One view of ``flat`` per parameter, shaped like it, in order, back to back."""
    need = sum(p.data.size for p in params)
    if need != flat.size:
        raise ValueError(f"flat buffer holds {flat.size} values but the parameters need {need}")
    views, offset = [], 0
    for p in params:
        views.append(flat[offset:offset + p.data.size].reshape(p.data.shape))
        offset += p.data.size
    return views


def weight_digest(params) -> np.ndarray:
    """float64 [sum of weights, position-weighted sum]: equal weights give bitwise equal digests."""
    total = positional = 0.0
    for i, p in enumerate(params):
        s = float(np.sum(p.data, dtype=np.float64))
        total += s
        positional += (i + 1) * s
    return np.array([total, positional], dtype=np.float64)


class Engine:
    """Drives ``replicas`` (this instance's) of ``model`` and keeps every instance in step.

    ``grad_dtype`` is the flat buffer's type. float64 (the default) makes the sum over micro-batches
    and replicas exact in practice for float32 gradients, so its order, which depends on how the
    replicas are split over instances and on MPI's reduction tree, does not change the rounded
    result: 1x4, 2x2 and 4x1 then give the same weights even in training regimes that amplify
    rounding differences (small-batch norms, LARS). float32 halves the all-reduce bytes and matches
    only to float32 rounding, which such regimes can amplify past 1e-5 within 20 updates.

    ``num_flags`` host values ride with each update's all-reduce: the caller sets ``flags`` before
    an update and reads their sum over instances in ``agreed_flags`` after it (every instance reads
    the same sum), without a collective of its own.
    """

    def __init__(self, model, optimizer, schedule, comm, replicas: Sequence[Replica], *, grad_accum: int,
                 total_replicas: int, scaler: LossScaler, ema=None, ema_every_step: bool = False,
                 checksum_every: int = 0, grad_dtype=np.float64,
                 emulation: PrecisionEmulation | None = None, num_flags: int = 0) -> None:
        if total_replicas != len(replicas) * comm.size:
            raise ValueError(f"{total_replicas} total replicas but {len(replicas)} local replicas x "
                             f"{comm.size} instances; every instance must run the same number of replicas")
        self.model, self.optimizer, self.schedule, self.comm = model, optimizer, schedule, comm
        self.replicas = list(replicas)
        self.params = model.params()
        self.grad_accum, self.total_replicas = int(grad_accum), int(total_replicas)
        self.scaler, self.ema, self.ema_every_step = scaler, ema, ema_every_step
        self.checksum_every = int(checksum_every)
        self.emulation = emulation  # float16 numerics (ipu.emulate_precision); None: float32 throughout
        size, grad_dtype = sum(p.data.size for p in self.params), np.dtype(grad_dtype)
        self._fused = grad_dtype == np.float64  # metrics and flags ride in the gradient all-reduce
        # one loss-sum slot per replica of the job: each instance fills its own and sums the job's in
        # replica order after the all-reduce (x + 0 is exact), so the reported loss has the same bits
        # however the replicas are split over instances
        self._metrics_at = int(total_replicas)
        side = self._metrics_at + _COUNTS + int(num_flags)
        self._buffer = np.zeros(size + side * self._fused, dtype=grad_dtype)
        self.flat = self._buffer[:size]  # the gradients; then [loss sum per replica, correct, count, *flags]
        self._side = self._buffer[size:] if self._fused else np.zeros(side, np.float64)
        self.views = flat_views(self.params, self.flat)
        self.flags = np.zeros(int(num_flags))  # the host's values for the next update
        self.agreed_flags = np.zeros(int(num_flags))  # their sum over instances at the last update
        self.feeds = [ReplicaFeed() for _ in self.replicas]  # one infeed view per local replica
        self.step = 0  # weight updates done (applied or skipped)
        self.sync_seconds = 0.0
        self.times = PhaseTimes()  # the engine's phases; the replicas keep their own
        self._grads: tuple[int | None, np.ndarray | None] = (None, None)  # (generation, span of the model's gradients)
        self.probe = None  # a models.optim.probe.UpdateProbe: per-group update statistics every few updates

    def phase_seconds(self) -> PhaseTimes:
        """Seconds per phase so far, the engine's and every local replica's together."""
        total = PhaseTimes()
        for times in (self.times, *(r.times for r in self.replicas)):
            total += times
        return total

    # -- start ---------------------------------------------------------------------------
    def broadcast_initial_state(self) -> None:
        """Copy instance 0's weights and buffers to every instance; reset the replicas' states."""
        for p in self.params:
            self._broadcast_array(p.data)
        buffers = self.model.buffers()
        for key in sorted(buffers):
            self._broadcast_array(buffers[key])
        for replica in self.replicas:
            replica.load_state_dict({k: v.copy() for k, v in buffers.items()})
        if self.emulation is not None:
            self.emulation.store_initial()

    @contextlib.contextmanager
    def _compute_weights(self):
        """The weights the replicas compute with: float16-rounded under emulation, else as they are.
        ``16.16`` training weights are float16 values already (``PrecisionEmulation.stores_half``):
        rounding them again would change nothing (0.3 ms per update of the default job)."""
        if self.emulation is None or self.emulation.stores_half:
            yield
            return
        with self.times.measure("precision_emulation"):
            self.emulation.round_for_compute()
        try:
            yield
        finally:
            with self.times.measure("precision_emulation"):
                self.emulation.restore_masters()

    def _broadcast_array(self, array: np.ndarray) -> None:
        if array.flags.c_contiguous:
            self.comm.broadcast(array, root=0)
        else:
            tmp = np.ascontiguousarray(array)
            self.comm.broadcast(tmp, root=0)
            np.copyto(array, tmp)

    # -- one host call: device iterations ----------------------------------------------
    def train_steps(self, batches: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[StepMetrics]:
        """``len(batches)`` weight updates in one host call (``device_iterations``).

        Each batch is (uint8 images [local_replicas, A, M, H, W, C], labels [local_replicas, A, M]);
        replica ``r`` gets views ``images[r]`` through its infeed. Returns the outfeed: the metrics
        of every update, in order.
        """
        if not batches:
            raise ValueError("train_steps needs at least one batch (device_iterations >= 1)")
        for images, labels in batches:
            self._check_batch(images, labels)
        for r, feed in enumerate(self.feeds):
            feed.load([(images[r], labels[r]) for images, labels in batches])
        return [_metrics(self._device_step()) for _ in batches]

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> StepMetrics:
        """One weight update: ``train_steps`` with one device iteration."""
        return self.train_steps([(images, labels)])[0]

    def _device_step(self) -> dict[str, float]:
        start = time.perf_counter()
        modelled = sum(r.times.seconds["model"] for r in self.replicas)
        self._buffer.fill(0.0)
        local = ReplicaResult()
        side, at = self._side, self._metrics_at
        side[:at] = 0.0
        with self._compute_weights():
            for replica, feed in zip(self.replicas, self.feeds):
                result = replica.run_from(feed, step=self.step, grads=self.views, loss_scale=self.scaler.scale)
                side[replica.index] = result.loss_sum
                local += result
        computed = time.perf_counter()
        side[at:at + _COUNTS] = local.correct, local.count
        side[at + _COUNTS:] = self.flags
        self.sync_gradients()
        synced = time.perf_counter()
        self.sync_seconds += synced - computed
        self.times.add("all_reduce", synced - computed)
        with self.times.measure("metrics"):
            if not self._fused:
                self.comm.allreduce(side, op="sum")
            self.agreed_flags[:] = side[at + _COUNTS:]
            loss_sum = 0.0
            for value in side[:at].tolist():  # replica order, whatever the instances (not sum(): 3.12 compensates)
                loss_sum += value
            correct, count = side[at:at + _COUNTS].tolist()
            loss, accuracy, count = loss_sum / count, correct / count, int(count)
        updating, emulated = time.perf_counter(), self.times.seconds["precision_emulation"]
        lr, applied, scale = self._update(loss)
        self.step += 1
        self._maybe_check_weights()
        # the optimizer's phase, without the float16 storage of 16.16 that _update times as emulation
        self.times.add("optimizer", time.perf_counter() - updating - (self.times.seconds["precision_emulation"] - emulated))
        report_progress(f"step {self.step}")
        done = time.perf_counter()
        return {"step": self.step - 1, "loss": loss, "accuracy": accuracy, "lr": lr, "applied": applied,
                "loss_scale": scale, "samples": count, "compute_s": computed - start, "sync_s": synced - computed,
                "model_s": sum(r.times.seconds["model"] for r in self.replicas) - modelled,
                "update_s": done - synced}

    def sync_gradients(self) -> None:
        """The one all-reduce (sum) of the flat buffer, and the metrics and flags behind it when they
        ride in it, across instances, in place."""
        self.comm.allreduce(self._buffer, op="sum")

    def _check_batch(self, images: np.ndarray, labels: np.ndarray) -> None:
        want = (len(self.replicas), self.grad_accum)
        if images.shape[:2] != want or labels.shape[:2] != want:
            raise ValueError(f"batch of shape {images.shape} / labels {labels.shape} does not match "
                             f"[local_replicas={want[0]}, grad_accum={want[1]}, micro_batch, H, W, C]")

    def _update(self, loss: float) -> tuple[float, bool, float]:
        scale, divisor = self.scaler.scale, self.total_replicas * self.grad_accum
        if self._grads[0] != generation():  # a parameter's array replaced: look again
            self._grads = (generation(), span([p.grad for p in self.params]))
        grads = self._grads[1]
        if grads is not None:  # the model's gradients are one buffer (models.param.pack_grads):
            # one pass makes the mean over every micro-batch of every replica, unscales it and writes it there
            finite = self.scaler.unscale_into(self.flat, grads, divisor=divisor)
        else:
            finite = self.scaler.unscale_([self.flat], divisor=divisor)  # the same, in place, then copied
            for p, g in zip(self.params, self.views):
                np.copyto(p.grad, g)
        finite = finite and math.isfinite(loss)
        lr = self.schedule.lr_at(self.step)
        if not self.scaler.update(finite, step=self.step, loss=loss):
            return lr, False, scale
        probe = self.probe if self.probe is not None and self.probe.due(self.step) else None
        if probe is not None:
            probe.before()
        self.optimizer.step(lr)
        if probe is not None:
            probe.after(self.step, lr)
        if self.emulation is not None:
            with self.times.measure("precision_emulation"):  # not the optimizer's: taken out below
                self.emulation.store_update(self.step)
        if self.ema is not None and self.ema_every_step:
            self.ema.update()
        return lr, True, scale

    # -- checks --------------------------------------------------------------------------
    def _maybe_check_weights(self) -> None:
        if self.checksum_every and self.step % self.checksum_every == 0:
            self.check_weights()

    def check_weights(self) -> None:
        """All-gather a float64 digest of the weights; raise if any instance differs from 0."""
        digests = self.comm.allgather(weight_digest(self.params))
        bad = [i for i in range(len(digests)) if not np.array_equal(digests[i], digests[0])]
        if bad:
            raise WeightDivergenceError(
                f"weights diverged after update {self.step}: instance(s) {bad} differ from instance 0 "
                f"(digests {digests[0].tolist()} vs {[digests[i].tolist() for i in bad]}); every instance must "
                "apply the same all-reduced gradients: check for non-deterministic kernels, a different "
                "config or code version on some instance, or hardware faults")

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, batches, use_ema: bool = False,
                 predictions: np.ndarray | None = None) -> tuple[float, float, int]:
        """Mean loss, accuracy and sample count over an evaluation loader, reduced over instances.

        Each replica evaluates its share with its own batch-norm statistics. ``predictions``: an integer
        array with one entry per sample of the loader's dataset, filled on every instance with each
        sample's predicted class (top-1), by sample id.
        """
        local = ReplicaResult()
        mine = None if predictions is None else np.zeros(len(predictions), np.int64)  # class + 1; 0: not mine
        ctx = self.ema.averaged() if (use_ema and self.ema is not None) else contextlib.nullcontext()
        rounded = self.emulation.compute_weights() if self.emulation is not None else contextlib.nullcontext()
        with ctx, rounded:  # not timed: evaluation is no part of the update time
            for batch in batches:
                for r, replica in enumerate(self.replicas):
                    out = None if mine is None else np.zeros(batch.labels[r].shape, np.int64)
                    local += replica.evaluate(batch.images[r], batch.labels[r], batch.mask[r], out)
                    if out is not None:
                        keep = np.asarray(batch.mask[r], bool)
                        mine[batch.sample_ids[r][keep]] = out[keep] + 1
                report_progress("evaluating")
        totals = self.comm.allreduce(np.array([local.loss_sum, local.correct, local.count], np.float64), op="sum")
        count = int(totals[2])
        if count == 0:
            raise ValueError("evaluation saw no samples: the validation split is empty")
        if mine is not None:  # every sample is evaluated once, by one replica of one instance
            predictions[:] = self.comm.allreduce(mine, op="sum") - 1
        return float(totals[0] / count), float(totals[1] / count), count

    # -- replica-local state across instances --------------------------------------------
    def gather_replica_states(self) -> list[dict[str, np.ndarray]] | None:
        """Every global replica's state (in replica order) on every instance; None if stateless."""
        states = [r.state_dict() for r in self.replicas]
        keys = sorted(states[0]) if states else []
        if not keys:
            return None
        local = np.concatenate([np.concatenate([s[k].reshape(-1).astype(np.float64) for k in keys]) for s in states])
        gathered = self.comm.allgather(local).reshape(self.total_replicas, -1)
        template = states[0]
        out = []
        for row in gathered:
            state, offset = {}, 0
            for k in keys:
                n = template[k].size
                state[k] = row[offset:offset + n].reshape(template[k].shape).astype(template[k].dtype)
                offset += n
            out.append(state)
        return out


__all__ = ["Engine", "NonFiniteLossError", "StepMetrics", "WeightDivergenceError", "flat_views", "weight_digest"]
