"""One replica's share of a training step, behind a small interface the engine drives.

A replica receives its slice of the instance's batch, still uint8 as the host shipped it:
``images[A, M, H, W, C]`` and ``labels[A, M]`` (A gradient-accumulation micro-batches of M). On
the "device" it normalises each micro-batch (``ipu.runtime.normalise``, the first operation), applies the
recipe's mixup and cutmix, runs forward and backward, and **adds** the gradients of
``loss_scale * mean_loss(micro-batch)`` into the engine's buffers (one view per parameter of the
engine's flat buffer). The engine turns the sum into a mean over micro-batches and replicas.

Local replicas share the model's weights (the engine keeps them identical anyway) but each has
its own replica-local state (batch-norm running statistics), swapped into the model around its
work, and its own random streams, a pure function of ``(seed, step, global replica index,
micro-batch)``, so results do not depend on how replicas are spread over instances.

Two implementations: :class:`SingleIpuReplica` (the whole model on one IPU) and
:class:`PipelinedIpuReplica` (the model cut into stages on several IPUs, run by
``ipu.runtime.pipelined_replica.PipelinedReplica``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ipu.runtime.emulation import HalfRounder
from ipu.runtime.mixing import Targets, cutmix, mixed_cross_entropy, mixup
from ipu.runtime.normalise import normalise
from ipu.runtime.streams import ReplicaFeed, array_feed
from models.loss import softmax_cross_entropy


@dataclass
class ReplicaResult:
    """Sums over the samples a replica processed: loss (unscaled), correct top-1, sample count."""

    loss_sum: float = 0.0
    correct: int = 0
    count: int = 0

    def __add__(self, other: ReplicaResult) -> ReplicaResult:
        return ReplicaResult(self.loss_sum + other.loss_sum, self.correct + other.correct, self.count + other.count)


class Replica(Protocol):
    """What the engine needs from a replica (single-IPU or pipelined)."""

    index: int  # global replica index

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult: ...

    def evaluate(self, images: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> ReplicaResult: ...

    def state_dict(self) -> dict[str, np.ndarray]: ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


def replica_rng(seed: int, step: int, replica: int, micro_batch: int) -> np.random.Generator:
    """The random stream of one micro-batch of one replica at one weight update."""
    return np.random.default_rng([seed, step, replica, micro_batch])


@dataclass(frozen=True)
class DeviceOps:
    """The device-side work around the model: normalisation, mixup/cutmix and the loss.

    mean/std: per-channel, pixel units (the dataset's). mixup_alpha: lambda ~ Beta(a, a), 0 off.
    cutmix_lambda: the fraction of each image kept (a box of ``1 - lambda`` of the area comes from
    another sample of the micro-batch), 0 off. Both mix labels in the same proportions.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    seed: int = 0
    mixup_alpha: float = 0.0
    cutmix_lambda: float = 0.0
    label_smoothing: float = 0.0

    def prepare(self, images: np.ndarray, labels: np.ndarray, rng: np.random.Generator,
                out: np.ndarray | None = None) -> tuple[np.ndarray, Targets]:
        """uint8 [M, H, W, C] -> float32 input and the mixed targets."""
        x = normalise(images, self.mean, self.std, out=out)
        targets: Targets = [(1.0, labels)]
        if self.mixup_alpha > 0.0:
            x, targets = mixup(x, targets, rng, self.mixup_alpha)
        if self.cutmix_lambda > 0.0:
            x, targets = cutmix(x, targets, rng, self.cutmix_lambda)
        return x, targets

    def loss(self, logits: np.ndarray, labels: np.ndarray, targets: Targets,
             loss_scale: float) -> tuple[ReplicaResult, np.ndarray]:
        """Mixed cross-entropy of one micro-batch and d(loss_scale * loss)/d(logits)."""
        loss, dlogits = mixed_cross_entropy(logits, targets, self.label_smoothing)
        dlogits *= loss_scale
        correct = int(np.count_nonzero(logits.argmax(axis=1) == labels))
        return ReplicaResult(loss * len(labels), correct, len(labels)), dlogits


@contextlib.contextmanager
def replica_state(model, state: dict[str, np.ndarray]) -> Iterator[None]:
    """Swap a replica's own buffers (norm running statistics) into the shared model, and back out."""
    buffers = model.buffers()
    for key, value in state.items():
        np.copyto(buffers[key], value)
    try:
        yield
    finally:
        for key, value in state.items():
            np.copyto(value, buffers[key])


class _ReplicaBase:
    """``half``: a ``HalfRounder`` when the compute is emulated in float16 (``ipu.emulate_precision``
    with 16.32 or 16.16): the input and the gradient partials are rounded to float16 (nearest)."""

    def __init__(self, model, index: int, device: DeviceOps, half: HalfRounder | None = None) -> None:
        self.model, self.index, self.device, self.half = model, int(index), device, half
        self._state = {k: v.copy() for k, v in model.buffers().items()}
        self._x: np.ndarray | None = None

    def run(self, images: np.ndarray, labels: np.ndarray, *, step: int, grads: Sequence[np.ndarray],
            loss_scale: float) -> ReplicaResult:
        """One step from arrays (``images`` uint8 [A, M, H, W, C]): :meth:`run_from` through a feed."""
        return self.run_from(array_feed(images, labels), step=step, grads=grads, loss_scale=loss_scale)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self._state.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if set(state) != set(self._state):
            raise ValueError(f"replica {self.index}: state keys {sorted(state)[:5]} do not match the model's "
                             f"buffers {sorted(self._state)[:5]}; the checkpoint is for another model")
        for key, value in state.items():
            np.copyto(self._state[key], value)

    def _input(self, images: np.ndarray, labels: np.ndarray, rng) -> tuple[np.ndarray, Targets]:
        if self._x is None or self._x.shape != images.shape:
            self._x = np.empty(images.shape, np.float32)
        x, targets = self.device.prepare(images, labels, rng, out=self._x)
        if self.half is not None:
            self.half.round_(x)
        return x, targets

    def _add_partials(self, grads: Sequence[np.ndarray], partials: Sequence[np.ndarray]) -> None:
        """Add this replica's gradients into the engine's buffers (rounded to float16 first if emulated)."""
        for g, partial in zip(grads, partials):
            if self.half is not None:
                self.half.round_(partial)
            g += partial

    def evaluate(self, images: np.ndarray, labels: np.ndarray, mask: np.ndarray) -> ReplicaResult:
        """Loss and top-1 of the masked samples, inference mode, this replica's statistics."""
        total = ReplicaResult()
        with replica_state(self.model, self._state):
            for a in range(images.shape[0]):
                keep = np.asarray(mask[a], bool)
                if not keep.any():
                    continue
                x = normalise(images[a], self.device.mean, self.device.std)
                if self.half is not None:
                    self.half.round_(x)
                logits = self.model.forward(x, training=False)[keep]
                loss, _ = softmax_cross_entropy(logits, labels[a][keep])
                correct = int(np.count_nonzero(logits.argmax(axis=1) == labels[a][keep]))
                total += ReplicaResult(loss * len(logits), correct, len(logits))
        return total


class SingleIpuReplica(_ReplicaBase):
    """The whole model on one IPU: micro-batches one after another, gradients summed."""

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult:
        params = self.model.params()
        total = ReplicaResult()
        with replica_state(self.model, self._state):
            for a in range(feed.num_micro_batches):
                images, labels = feed.next()
                rng = replica_rng(self.device.seed, step, self.index, a)
                x, targets = self._input(images, labels, rng)
                self.model.set_rng(rng)
                logits = self.model.forward(x, training=True)
                result, dlogits = self.device.loss(logits, labels, targets, loss_scale)
                self.model.backward(dlogits, need_dx=False)
                self._add_partials(grads, [p.grad for p in params])
                total += result
        return total


class PipelinedIpuReplica(_ReplicaBase):
    """The model cut at ``splits`` into stages on their own IPUs (``ipu/runtime/pipelined_replica.py``).

    The pipeline needs every micro-batch's input up front, so all A are normalised and mixed
    first. Its recomputation re-runs forwards, which redraws dropout and drop-connect masks: with
    those enabled the gradients differ from the single-IPU replica's (with them off they agree).
    """

    def __init__(self, model, index: int, device: DeviceOps, splits: Sequence[str], schedule: str = "grouped",
                 recompute: bool = True, half: HalfRounder | None = None) -> None:
        from ipu.runtime.pipelined_replica import PipelinedReplica

        super().__init__(model, index, device, half)
        self.pipeline = PipelinedReplica(model, list(splits), schedule=schedule, recompute=recompute)

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult:
        micro, targets = [], {}
        num = feed.num_micro_batches
        for a in range(num):
            images, y = feed.next()
            x, mixed = self.device.prepare(images, y, replica_rng(self.device.seed, step, self.index, a))
            if self.half is not None:
                self.half.round_(x)
            micro.append((x, y))
            targets[id(y)] = mixed
        results: list[ReplicaResult] = []

        def loss_fn(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
            result, dlogits = self.device.loss(logits, y, targets[id(y)], loss_scale)
            results.append(result)
            return result.loss_sum / max(result.count, 1), dlogits

        # dropout draws: one stream for the whole pipelined run (stream id A: after the micro-batches')
        self.model.set_rng(replica_rng(self.device.seed, step, self.index, num))
        with replica_state(self.model, self._state):
            out = self.pipeline.run(micro, loss_fn)
        self._add_partials(grads, [out.grads[p.name] for p in self.model.params()])
        return sum(results, ReplicaResult())
