"""The host side of the emulated IPU I/O: uint8 batches shaped for the engine, prefetched.

A producer thread builds batches (gather from RAM or read from disk, then random-resized crop and
flip in numba, GIL released) and puts them in a bounded queue (default depth 3), the emulated I/O
tiles: the next batch arrives while the current one computes. Time the training thread spends
blocked on the queue is counted in ``Loader.stats.wait_seconds`` (the host-to-device stall).

Every batch is a pure function of ``(seed, epoch, step)`` and the batch spec; see
:mod:`data.sharding` for the order, the replica layout and the remainder policy.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from data.augment import AugmentConfig, augment_batch
from data.dataset import Dataset, gather_rows
from data.layout import DatasetError
from data.sharding import epoch_order, global_batch_rows, shard_for, steps_per_epoch

logger = logging.getLogger(__name__)

CACHE_MODES = ("auto", "memory", "stream")


@dataclass(frozen=True)
class BatchSpec:
    """How one global batch is split: ``M * A * local_replicas * num_instances`` samples.

    ``instance_index`` owns global replicas ``[instance_index * local_replicas, ...)`` (the launcher's
    ``POPDIST_REPLICA_INDEX_OFFSET``; :meth:`of_placement` fills it from the launcher's placement).
    """

    micro_batch: int
    grad_accum: int = 1
    local_replicas: int = 1
    num_instances: int = 1
    instance_index: int = 0

    def __post_init__(self) -> None:
        for name in ("micro_batch", "grad_accum", "local_replicas", "num_instances"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.instance_index < self.num_instances:
            raise ValueError(f"instance_index {self.instance_index} is outside [0, {self.num_instances})")

    @classmethod
    def of_placement(cls, placement, micro_batch: int, grad_accum: int = 1) -> BatchSpec:
        """This instance's share of every global batch: its replicas from the launcher's ``placement``
        (anything with ``num_local_replicas``, ``num_instances`` and ``index``: ``poprun_py.topology.InstanceInfo``)."""
        return cls(micro_batch=micro_batch, grad_accum=grad_accum, local_replicas=placement.num_local_replicas,
                   num_instances=placement.num_instances, instance_index=placement.index)

    @property
    def total_replicas(self) -> int:
        return self.local_replicas * self.num_instances

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.total_replicas


def host_batches_ahead(prefetch_micro_batches: int, grad_accum: int) -> int:
    """Host batches the loader's thread keeps ready (``Loader(prefetch_batches=...)``) so that each replica has
    ``prefetch_micro_batches`` micro-batches ahead: one host batch holds ``grad_accum`` of them per replica
    (0: no prefetch, batches are built on the training thread)."""
    if prefetch_micro_batches < 0 or grad_accum < 1:
        raise ValueError(f"prefetch_micro_batches must be >= 0 and grad_accum >= 1, got {prefetch_micro_batches}, {grad_accum}")
    return -(-prefetch_micro_batches // grad_accum)


@dataclass(frozen=True)
class Batch:
    """One step's data for this instance. ``mask`` is False on padding rows (pad-and-mask policy).

    images: uint8 [local_replicas, grad_accum, micro_batch, H, W, C]
    labels: int64 [local_replicas, grad_accum, micro_batch]
    sample_ids: int64, same shape: the row of each sample in the split
    """

    images: np.ndarray
    labels: np.ndarray
    mask: np.ndarray
    sample_ids: np.ndarray
    epoch: int
    step: int


@dataclass
class LoaderStats:
    """Counters for the emulated I/O: batches handed out and seconds the consumer waited for them
    (blocked on the queue, or building them itself with ``prefetch_batches=0``)."""

    batches: int = 0
    wait_seconds: float = 0.0


@dataclass(frozen=True)
class _Failure:
    error: BaseException


_END = object()


class Loader:
    """Iterates this instance's share of every global batch, one epoch per ``for`` loop.

    ``iter(loader)`` yields the batches from ``position`` to the end of that epoch; ``position`` is
    the (epoch, step) of the *next* batch and moves when a batch is handed out, so saving it after
    a training step and restoring it with :meth:`set_position` replays exactly the batches an
    uninterrupted run would see. ``prefetch_batches=0`` builds batches on the calling thread.
    ``cache="memory"`` reads the split into RAM once (at construction, so read errors surface
    before training); ``"stream"`` reads only this instance's rows of each step from disk;
    ``"auto"`` picks memory when the split fits ``memory_budget`` bytes.
    """

    def __init__(self, dataset: Dataset, spec: BatchSpec, *, seed: int = 0,
                 augment: bool | AugmentConfig = False, drop_remainder: bool = True, prefetch_batches: int = 3,
                 shuffle: bool = True, cache: str = "auto", memory_budget: int = 2**31) -> None:
        if prefetch_batches < 0:
            raise ValueError(f"prefetch_batches must be >= 0 (batches built ahead; 0: none), got {prefetch_batches}")
        if cache not in CACHE_MODES:
            raise ValueError(f"cache must be one of {CACHE_MODES}, got {cache!r}")
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.dataset, self.spec, self.seed = dataset, spec, int(seed)
        self.augment = AugmentConfig() if augment is True else (augment or None)
        self.drop_remainder, self.prefetch_batches, self.shuffle = drop_remainder, prefetch_batches, shuffle
        self.steps_per_epoch = steps_per_epoch(dataset.info.num_samples, spec.global_batch, drop_remainder)
        if self.steps_per_epoch == 0:
            info = dataset.info
            raise DatasetError(
                f"{info.path}: split {info.split!r} has {info.num_samples} samples, fewer than one global batch "
                f"of {spec.global_batch} (micro_batch {spec.micro_batch} x grad_accum {spec.grad_accum} x "
                f"{spec.total_replicas} replicas); use a smaller batch, more data, or drop_remainder=False")
        self.stats = LoaderStats()
        self._position = (0, 0)
        self._order_cache: tuple[int, np.ndarray] | None = None
        self.cache = cache if cache != "auto" else ("memory" if dataset.info.nbytes <= memory_budget else "stream")
        self._images = dataset.read_all() if self.cache == "memory" else None
        if self.cache == "stream" and dataset.info.filtered:
            logger.warning("%s: streaming rows from a compressed or checksummed file reads whole chunks per step; "
                           "rewrite it with --no-checksum and without compression, or use cache='memory'.",
                           dataset.info.path, extra={"said_once": True})  # alike on every instance: said once a job
        logger.info("Loader %s: %d samples, global batch %d, %d steps/epoch, instance %d/%d takes rows [%d, %d) "
                    "of each, cache=%s, prefetch_batches=%d, augment=%s.", dataset.info.split, dataset.info.num_samples,
                    spec.global_batch, self.steps_per_epoch, spec.instance_index, spec.num_instances,
                    self._share.start, self._share.stop, self.cache, prefetch_batches, self.augment)

    @property
    def _share(self) -> slice:
        s = self.spec
        return shard_for(s.instance_index, s.num_instances, s.local_replicas, s.grad_accum, s.micro_batch)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of the batches: the augmentation's out_size, else the stored size."""
        h, w, c = self.dataset.info.image_shape
        if self.augment is not None and self.augment.out_size is not None:
            h, w = self.augment.out_size
        return h, w, c

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, step) of the next batch to be handed out."""
        return self._position

    def set_position(self, epoch: int, step: int) -> None:
        """Continue from ``(epoch, step)``; ``step == steps_per_epoch`` means the start of the next epoch."""
        if epoch < 0 or not 0 <= step <= self.steps_per_epoch:
            raise ValueError(f"position ({epoch}, {step}) is invalid: epoch >= 0, 0 <= step <= {self.steps_per_epoch}")
        self._position = (epoch + 1, 0) if step == self.steps_per_epoch else (epoch, step)

    def state(self) -> dict:
        """What a checkpoint stores to resume the data stream."""
        return {"epoch": self._position[0], "step": self._position[1], "seed": self.seed,
                "global_batch": self.spec.global_batch, "num_samples": self.dataset.info.num_samples}

    def load_state(self, state: dict) -> None:
        """Restore :meth:`state`; refuses a state taken with another seed, batch or dataset size."""
        mine = self.state()
        for key in ("seed", "global_batch", "num_samples"):
            if state.get(key) != mine[key]:
                raise ValueError(f"loader state has {key}={state.get(key)} but this loader has {mine[key]}; "
                                 "resuming would replay different batches")
        self.set_position(int(state["epoch"]), int(state["step"]))

    def _epoch_order(self, epoch: int) -> np.ndarray:
        cached = self._order_cache
        if cached is not None and cached[0] == epoch:
            return cached[1]
        n = self.dataset.info.num_samples
        order = epoch_order(n, self.seed, epoch) if self.shuffle else np.arange(n, dtype=np.int64)
        self._order_cache = (epoch, order)
        return order

    def batch_at(self, epoch: int, step: int) -> Batch:
        """Build batch ``(epoch, step)`` on the calling thread (what the producer thread runs)."""
        rows, mask = global_batch_rows(self._epoch_order(epoch), self.spec.global_batch, step, self.drop_remainder)
        rows, mask = rows[self._share], mask[self._share]
        images = np.empty((len(rows), *self.image_shape), self.dataset.dtype)
        if self.augment is not None:
            src, src_rows = self._images, rows
            if src is None:
                src = np.empty((len(rows), *self.dataset.info.image_shape), self.dataset.dtype)
                self.dataset.read_rows(rows, src)
                src_rows = np.arange(len(rows), dtype=np.int64)
            augment_batch(src, src_rows, rows, self.seed, epoch, self.augment, images)
        elif self._images is not None:
            gather_rows(self._images, rows, images)
        else:
            self.dataset.read_rows(rows, images)
        s = self.spec
        lead = (s.local_replicas, s.grad_accum, s.micro_batch)
        return Batch(images=images.reshape(*lead, *self.image_shape),
                     labels=self.dataset.labels[rows].reshape(lead), mask=mask.reshape(lead),
                     sample_ids=rows.reshape(lead), epoch=epoch, step=step)

    def _advance(self, batch: Batch) -> None:
        self.set_position(batch.epoch, batch.step + 1)
        self.stats.batches += 1

    def __iter__(self) -> Iterator[Batch]:
        """The batches from ``position`` to the end of its epoch."""
        epoch, step = self._position
        return self._batches(epoch, step, self.steps_per_epoch - step)

    def take(self, count: int) -> Iterator[Batch]:
        """The next ``count`` batches from ``position``, across epoch boundaries (a host call of
        several weight updates, as the pipelining API's infeed asks for)."""
        epoch, step = self._position
        return self._batches(epoch, step, count)

    def _positions(self, epoch: int, step: int, count: int) -> Iterator[tuple[int, int]]:
        for _ in range(count):
            yield epoch, step
            epoch, step = (epoch + 1, 0) if step + 1 == self.steps_per_epoch else (epoch, step + 1)

    def _batches(self, epoch: int, step: int, count: int) -> Iterator[Batch]:
        if self.prefetch_batches == 0:  # built on the calling thread, which waits for all of it
            for position in self._positions(epoch, step, count):
                start = time.perf_counter()
                batch = self.batch_at(*position)
                self.stats.wait_seconds += time.perf_counter() - start
                self._advance(batch)
                yield batch
            return
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch_batches)
        stop = threading.Event()
        worker = threading.Thread(target=self._produce, args=(self._positions(epoch, step, count), ready, stop),
                                  name="data-loader", daemon=True)
        worker.start()
        try:
            while True:
                start = time.perf_counter()
                item = ready.get()
                self.stats.wait_seconds += time.perf_counter() - start
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                self._advance(item)
                yield item
        finally:
            stop.set()
            worker.join()

    def _produce(self, positions: Iterator[tuple[int, int]], ready: queue.Queue, stop: threading.Event) -> None:
        def put(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            for position in positions:
                if not put(self.batch_at(*position)):
                    return
            put(_END)
        except BaseException as err:  # handed to the training thread, which re-raises it
            put(_Failure(err))


def evaluation_loader(dataset: Dataset, spec: BatchSpec, *, out_size: tuple[int, int] | None = None,
                      prefetch_batches: int = 3, cache: str = "auto") -> Loader:
    """Validation order: no shuffle, no random augmentation, the last batch padded and masked.

    Every validation sample appears exactly once with ``mask=True`` across all replicas.
    ``out_size`` resizes whole images (bilinear, no crop, no flip) to the training resolution.
    """
    resize = None
    if out_size is not None:
        h, w, _ = dataset.info.image_shape
        resize = AugmentConfig(out_size=out_size, scale=(1.0, 1.0), ratio=(w / h, w / h), flip=False)
    return Loader(dataset, spec, seed=0, augment=resize or False, drop_remainder=False, prefetch_batches=prefetch_batches,
                  shuffle=False, cache=cache)
