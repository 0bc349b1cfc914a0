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
``ipu.pipeline.execution.PipelinedReplica``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ipu.pipeline.execution import PipelinedReplica
from jit import jit
from jit.hashing import hash3, splitmix64
from ipu.runtime.emulation import HalfRounder
from ipu.runtime.mixing import Targets, cutmix, mixed_cross_entropy, mixup
from ipu.runtime.normalise import normalise
from ipu.runtime.phases import PhaseTimes
from ipu.runtime.streams import ReplicaFeed
from models.loss import softmax_cross_entropy
from models.param import generation, span


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
    times: PhaseTimes  # seconds of its normalise, model, gradient sum and float16 rounding

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult: ...

    def evaluate(self, images: np.ndarray, labels: np.ndarray, mask: np.ndarray,
                 predicted: np.ndarray | None = None) -> ReplicaResult: ...

    def state_dict(self) -> dict[str, np.ndarray]: ...

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None: ...


_MASK64 = (1 << 64) - 1


@jit
def _stream_words(seed, step, key):
    """Four 64-bit words of a stream's start: ``hash3(seed, step, key)`` and three splitmix64 steps on."""
    h0 = hash3(seed, step, key)
    h1 = splitmix64(h0)
    h2 = splitmix64(h1)
    return h0, h1, h2, splitmix64(h2)


def replica_rng(seed: int, step: int, replica: int, micro_batch: int,
                reuse: np.random.Generator | None = None) -> np.random.Generator:
    """The random stream of one micro-batch of one replica at one weight update: PCG64 started at a
    128-bit state and increment hashed from the four numbers (``jit.hashing.hash3``, then splitmix64).

    ``reuse``: a PCG64 generator to restart in place and return (the replicas keep one per
    micro-batch). A new generator costs a ``SeedSequence`` whatever its seed: 50 us, and 145 us
    right after a model step, when its code and data have left the caches; restarting one costs
    27 us (measured on Zen 1, the default job: two per update, 0.29 -> 0.05 ms).
    """
    if not (0 <= replica < 1 << 32 and 0 <= micro_batch < 1 << 32):
        raise ValueError(f"replica_rng: replica {replica} and micro-batch {micro_batch} must be in [0, 2**32)")
    h0, h1, h2, h3 = map(int, _stream_words(np.uint64(seed & _MASK64), np.uint64(step & _MASK64),
                                            np.uint64(replica << 32 | micro_batch)))
    state = {"bit_generator": "PCG64", "state": {"state": h0 << 64 | h1, "inc": (h2 << 64 | h3) | 1},
             "has_uint32": 0, "uinteger": 0}
    gen = reuse if reuse is not None else np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = state
    return gen


@dataclass(frozen=True)
class DeviceOps:
    """The device-side work around the model: normalisation, mixup/cutmix and the loss.

    mean/std: per-channel, pixel units (the dataset's). mixup_alpha: lambda ~ Beta(a, a), 0 off.
    cutmix_lambda: the fraction of each image kept (a box of ``1 - lambda`` of the area comes from
    another sample of the micro-batch), 0 off. Both mix labels in the same proportions.
    loss_fn: ``(logits, labels) -> (mean loss, d loss / d logits)`` in place of the mixed
    cross-entropy (the user's loss of ``ipu.runtime.pipelining``); it takes no mixing or smoothing.
    """

    mean: tuple[float, ...]
    std: tuple[float, ...]
    seed: int = 0
    mixup_alpha: float = 0.0
    cutmix_lambda: float = 0.0
    label_smoothing: float = 0.0
    loss_fn: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]] | None = None

    def __post_init__(self) -> None:
        if self.loss_fn is not None and (self.mixup_alpha or self.cutmix_lambda or self.label_smoothing):
            raise ValueError("DeviceOps: a custom loss_fn replaces the mixed cross-entropy, so mixup_alpha, "
                             "cutmix_lambda and label_smoothing must be 0 with it (smooth inside your loss)")

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
        """Mixed cross-entropy (or ``loss_fn``) of one micro-batch and d(loss_scale * loss)/d(logits)."""
        if self.loss_fn is not None:
            loss, grad = self.loss_fn(logits, labels)
            dlogits = np.array(grad, dtype=logits.dtype, copy=True)
        else:
            loss, dlogits = mixed_cross_entropy(logits, targets, self.label_smoothing)
        dlogits *= loss_scale
        correct = int(np.count_nonzero(logits.argmax(axis=1) == labels))
        return ReplicaResult(loss * len(labels), correct, len(labels)), dlogits


@jit
def _add_into(dst, src):
    """``dst += src`` over 1-D arrays, the cast (float32 partials into the float64 buffer) in
    registers: numpy's mixed-type add goes through a cast buffer at about twice the time."""
    for i in range(dst.size):
        dst[i] += src[i]


@contextlib.contextmanager
def replica_state(model, state: dict[str, np.ndarray]) -> Iterator[None]:
    """Swap a replica's own buffers (norm running statistics) into the shared model, and back out."""
    if not state:  # a model without buffers (group norm): nothing to swap
        yield
        return
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
        self._streams: dict[int, np.random.Generator] = {}  # per micro-batch, restarted every step
        self._spans: tuple = (None, None, None)  # SingleIpuReplica._flats
        self.times = PhaseTimes()

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self._state.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if set(state) != set(self._state):
            raise ValueError(f"replica {self.index}: state keys {sorted(state)[:5]} do not match the model's "
                             f"buffers {sorted(self._state)[:5]}; the checkpoint is for another model")
        for key, value in state.items():
            np.copyto(self._state[key], value)

    def _stream(self, step: int, micro_batch: int) -> np.random.Generator:
        """``replica_rng(seed, step, this replica, micro_batch)``, restarting this replica's generator
        of that micro-batch (the one the model drew from at the step before)."""
        gen = replica_rng(self.device.seed, step, self.index, micro_batch, reuse=self._streams.get(micro_batch))
        self._streams[micro_batch] = gen
        return gen

    def _input(self, images: np.ndarray, labels: np.ndarray, rng, reuse: bool = True) -> tuple[np.ndarray, Targets]:
        """The device's first operations on a uint8 micro-batch (into a reused buffer unless ``reuse``
        is false), rounded to float16 when the compute is emulated."""
        with self.times.measure("normalise"):
            if reuse and (self._x is None or self._x.shape != images.shape):
                self._x = np.empty(images.shape, np.float32)
            x, targets = self.device.prepare(images, labels, rng, out=self._x if reuse else None)
        self._round(x)
        return x, targets

    def _round(self, x: np.ndarray) -> None:
        if self.half is not None:
            with self.times.measure("precision_emulation"):
                self.half.round_(x)

    def _add_partials(self, grads: Sequence[np.ndarray], partials: Sequence[np.ndarray],
                      flats: tuple[np.ndarray | None, np.ndarray | None] | None = None) -> None:
        """Add this replica's gradients into the engine's buffers (rounded to float16 first if emulated).
        ``flats``: ``span`` of each list, where the caller knows them already."""
        flat_grads, flat_partials = flats or (span(grads), span(partials))
        if flat_grads is not None and flat_partials is not None and flat_grads.size == flat_partials.size:
            grads, partials = [flat_grads], [flat_partials]  # each one buffer: one operation
        for partial in partials:
            self._round(partial)
        with self.times.measure("gradient_sum"):
            for g, partial in zip(grads, partials):
                if g.ndim == 1 and partial.ndim == 1 and g.dtype != np.float16 and partial.dtype != np.float16:
                    _add_into(g, partial)  # the one flat buffer: a compiled pass
                else:
                    g += partial

    def evaluate(self, images: np.ndarray, labels: np.ndarray, mask: np.ndarray,
                 predicted: np.ndarray | None = None) -> ReplicaResult:
        """Loss and top-1 of the masked samples, inference mode, this replica's statistics; ``predicted``
        (shaped like ``labels``): each masked sample's predicted class written into it."""
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
                top = logits.argmax(axis=1)
                if predicted is not None:
                    predicted[a][keep] = top
                correct = int(np.count_nonzero(top == labels[a][keep]))
                total += ReplicaResult(loss * len(logits), correct, len(logits))
        return total


class SingleIpuReplica(_ReplicaBase):
    """The whole model on one IPU: micro-batches one after another, gradients summed."""

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult:
        params = self.model.params()
        flats = self._flats(grads, params)
        total = ReplicaResult()
        with replica_state(self.model, self._state):
            for a in range(feed.num_micro_batches):
                images, labels = feed.next()
                rng = self._stream(step, a)
                x, targets = self._input(images, labels, rng)
                with self.times.measure("model"):
                    self.model.set_rng(rng)
                    logits = self.model.forward(x, training=True)
                    result, dlogits = self.device.loss(logits, labels, targets, loss_scale)
                    self.model.backward(dlogits, need_dx=False)
                self._add_partials(grads, [p.grad for p in params], flats)
                total += result
        return total

    def _flats(self, grads: Sequence[np.ndarray], params) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``span`` of the engine's gradient views and of the model's gradients, remembered for this
        list of views until a parameter's arrays are replaced (``models.param.generation``): each
        ``span`` call walks its list, 20 us for efficientnet-tiny, and the answer is the same every step."""
        key = (generation(), id(grads))
        if self._spans[0] != key:
            self._spans = (key, grads, (span(grads), span([p.grad for p in params])))  # holds grads: its id stays
        return self._spans[2]


class PipelinedIpuReplica(_ReplicaBase):
    """The model cut at ``splits`` into stages on their own IPUs (``ipu/pipeline/execution.py``).

    The pipeline needs every micro-batch's input up front, so all A are normalised and mixed
    first, each with its micro-batch's stream ``replica_rng(seed, step, replica, a)``. The
    pipeline continues that stream for the micro-batch's dropout and drop-connect masks, stage
    after stage, and replays it when recomputing, and each micro-batch's gradient partials are added
    to the engine's buffers as its backward finishes. So this replica draws the same masks and adds
    the same partials in the same order as :class:`SingleIpuReplica`: the two agree bitwise.
    """

    def __init__(self, model, index: int, device: DeviceOps, splits: Sequence[str], schedule: str = "grouped",
                 recompute: bool = True, half: HalfRounder | None = None, device_mapping: Sequence[int] = ()) -> None:
        super().__init__(model, index, device, half)
        self.pipeline = PipelinedReplica(model, list(splits), schedule=schedule, recompute=recompute,
                                         device_mapping=device_mapping)
        self._position = {id(p): i for i, p in enumerate(model.params())}
        self.last_run = None  # the last step's ``PipelineResult`` (trace, CPU seconds per stage)

    def run_from(self, feed: ReplicaFeed, *, step: int, grads: Sequence[np.ndarray],
                 loss_scale: float) -> ReplicaResult:
        micro, rngs, targets = [], [], []
        for a in range(feed.num_micro_batches):
            images, y = feed.next()
            rng = self._stream(step, a)
            x, mixed = self._input(images, y, rng, reuse=False)
            micro.append((x, y))
            rngs.append(rng)
            targets.append(mixed)
        results: list[ReplicaResult] = []
        index = {id(y): a for a, (_, y) in enumerate(micro)}

        def loss_fn(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
            result, dlogits = self.device.loss(logits, y, targets[index[id(y)]], loss_scale)
            results.append(result)
            return result.loss_sum / max(result.count, 1), dlogits

        def accumulate(params) -> None:
            self._add_partials([grads[self._position[id(p)]] for p in params], [p.grad for p in params])

        # the pipeline adds partials as it goes: those phases are timed inside, "model" is the rest
        inner_before = self.times.seconds["gradient_sum"] + self.times.seconds["precision_emulation"]
        start = time.perf_counter()
        with replica_state(self.model, self._state):
            self.last_run = self.pipeline.run(micro, loss_fn, rngs=rngs, accumulate=accumulate)
        inner = self.times.seconds["gradient_sum"] + self.times.seconds["precision_emulation"] - inner_before
        self.times.add("model", time.perf_counter() - start - inner)
        return sum(results, ReplicaResult())


def make_replicas(model, device: DeviceOps, indices: Sequence[int], splits: Sequence[str] = (),
                  schedule: str = "grouped", recompute: bool = True, device_mapping: Sequence[int] = (),
                  half: bool = False) -> list[SingleIpuReplica | PipelinedIpuReplica]:
    """One replica per global index in ``indices``: pipelined at ``splits`` when there are any, else the
    whole model on one IPU; ``half``: each with its own ``HalfRounder`` (float16 compute emulated)."""
    if splits:
        return [PipelinedIpuReplica(model, r, device, splits, schedule, recompute,
                                    half=HalfRounder() if half else None, device_mapping=device_mapping)
                for r in indices]
    return [SingleIpuReplica(model, r, device, half=HalfRounder() if half else None) for r in indices]
