"""Host loops around simulated IPUs, in the shape of Graphcore's TensorFlow ``ipu.loops`` and feeds.

* :class:`IPUInfeedQueue` streams a dataset's uint8 images to every replica (normalised on the
  device with the dataset's mean and std), ``batch_size`` samples per micro-batch per replica;
  each instance reads only its own replicas' share of every global batch.
* :class:`IPUOutfeedQueue` hands results back: one record per weight update (mean loss and
  top-1 accuracy over the update's micro-batches and replicas, learning rate, samples, step);
  ``dequeue()`` returns everything since the last call as arrays, one entry per update.
* :func:`repeat` compiles a model on one IPU whose host call runs ``count`` weight updates
  (device iterations), as ``ipu.loops.repeat(count, body, infeed_queue=...)`` does.

A loop of several steps per host call::

    infeed = IPUInfeedQueue("data/fashion-mnist-subset.h5", batch_size=32)
    outfeed = IPUOutfeedQueue()
    train = repeat(10, model_fn, infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=opt_fn)
    for call in range(5):
        train.run()                       # 10 weight updates, one host call
        print(outfeed.dequeue()["loss"])  # their 10 losses
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from data.dataset import Dataset, open_dataset
from data.loader import BatchSpec, Loader, host_batches_ahead
from data.sources import dataset_path
from ipu.runtime.engine import StepMetrics
from ipu.runtime.program import Program, ProgramConfig, compile_program
from ipu.runtime.stages import StageLike

OUTFEED_FIELDS = ("step", "loss", "accuracy", "lr", "samples")


class IPUInfeedQueue:
    """The host side of every replica's infeed: a dataset split, shuffled per epoch, in micro-batches.

    ``dataset``: an open ``data.dataset.Dataset`` or the path of a dataset file (its ``split``); a
    relative path not found in the working directory is looked up in the installed distribution, as
    training does (``data.sources.dataset_path``), so ``"data/fashion-mnist-subset.h5"`` works anywhere.
    Batches are a pure function of ``(seed, epoch, step)``: a run is reproducible and the same on
    any split of the replicas over instances. The program that takes the queue binds it to its
    replicas and gradient accumulation count (:meth:`bind`). ``prefetch_micro_batches``: the micro-batches
    per replica a background thread keeps ready, as ``ipu.prefetch_micro_batches`` of a training run
    (``data.loader.host_batches_ahead``; 0: batches are built when the program needs them).
    """

    def __init__(self, dataset: Dataset | str | os.PathLike, batch_size: int, *, split: str = "train",
                 shuffle: bool = True, augment: bool = False, prefetch_micro_batches: int = 2) -> None:
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"IPUInfeedQueue: batch_size (samples per micro-batch per replica) must be an "
                             f"integer >= 1, got {batch_size!r}")
        self.dataset = dataset if isinstance(dataset, Dataset) else open_dataset(dataset_path(dataset), split)
        self.batch_size = int(batch_size)
        self.shuffle, self.augment, self.prefetch_micro_batches = shuffle, augment, prefetch_micro_batches
        self.loader: Loader | None = None

    @property
    def spec(self) -> BatchSpec:
        if self.loader is None:
            raise RuntimeError("this infeed is not bound to a program yet: pass it to pipeline(...) or repeat(...)")
        return self.loader.spec

    def bind(self, spec: BatchSpec, seed: int = 0) -> None:
        """Program side: this instance's replicas and accumulation count; one program per queue."""
        if self.loader is not None:
            raise RuntimeError("this IPUInfeedQueue already feeds a program: make one queue per program")
        if spec.micro_batch != self.batch_size:
            raise ValueError(f"batch spec micro-batch {spec.micro_batch} differs from batch_size {self.batch_size}")
        self.loader = Loader(self.dataset, spec, seed=seed, augment=self.augment, shuffle=self.shuffle,
                             prefetch_batches=host_batches_ahead(self.prefetch_micro_batches, spec.grad_accum))

    def next_steps(self, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The next ``count`` weight updates' data for this instance: (uint8 images [local replicas,
        accumulation, batch, H, W, C], labels [local replicas, accumulation, batch]) each."""
        if count < 1:
            raise ValueError(f"a host call runs at least one weight update, got count={count}")
        loader = self.loader
        if loader is None:
            raise RuntimeError("this infeed is not bound to a program yet: pass it to pipeline(...) or repeat(...)")
        return [(batch.images, batch.labels) for batch in loader.take(count)]


class IPUOutfeedQueue:
    """Results from the device to the host, one record per weight update."""

    def __init__(self) -> None:
        self._records: list[StepMetrics] = []

    def enqueue(self, metrics: Sequence[StepMetrics]) -> None:
        """Device side: the metrics of one host call's weight updates."""
        self._records.extend(metrics)

    def __len__(self) -> int:
        return len(self._records)

    def dequeue(self) -> dict[str, np.ndarray]:
        """Host side: ``{"step", "loss", "accuracy", "lr", "samples"}`` -> one value per weight update
        since the last ``dequeue`` (empty arrays when there were none)."""
        records, self._records = self._records, []
        return {name: np.array([getattr(r, name) for r in records],
                               dtype=np.int64 if name in ("step", "samples") else np.float64)
                for name in OUTFEED_FIELDS}


def repeat(count: int, body: StageLike | Sequence[StageLike], infeed_queue: IPUInfeedQueue,
           outfeed_queue: IPUOutfeedQueue | None = None, optimizer_function: Callable | None = None, *,
           gradient_accumulation_count: int = 1, seed: int = 0, available_memory_proportion: float = 0.6,
           chip: str = "mk2") -> Program:
    """Compile ``body`` on one IPU per replica; each ``run()`` of the result is ``count`` weight updates.

    ``body``: a stage function (images -> logits), a layer sequence, or a list of them run one
    after another (the stages of a pipeline, unpipelined). ``optimizer_function(logits, labels)``
    returns ``OptimizerFunctionOutput(OptimizerSpec(...), loss)``. ``gradient_accumulation_count``:
    micro-batches per weight update.
    """
    stages = list(body) if isinstance(body, (list, tuple)) else [body]
    cfg = ProgramConfig(gradient_accumulation=gradient_accumulation_count, pipelined=False, repeat_count=count,
                        seed=seed, available_memory_proportion=available_memory_proportion, chip=chip,
                        names=("gradient_accumulation_count", "stages"))
    return compile_program(stages, optimizer_function, infeed_queue, outfeed_queue, cfg)
