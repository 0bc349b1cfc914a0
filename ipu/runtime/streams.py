"""Host-device data streams of one host call: each replica's infeed view.

There is one infeed, and its prefetch is the loader's: ``data.loader.Loader`` builds the next
batches on a background thread into a bounded queue while the current one computes, which is
what the IO tiles do on an IPU (they hold the next micro-batches while the compute tiles work).
``ipu.prefetch_micro_batches`` sets both sides: the micro-batches each replica's IO tiles hold in the
device model (``ipu.io_tiles``) and how far the loader's thread runs ahead
(``data.loader.host_batches_ahead``; ``data.loader.BatchSpec.of_placement`` is each instance's share). The time the training thread still waits for input is measured by
the loader and reported by every run (``input_wait`` in its summary).

A :class:`ReplicaFeed` is the device side of that stream for one replica during one host call:
uint8 views, in order, of the micro-batches the host call's batches hold for it; nothing is
copied or queued again. The metrics of every device iteration come back as the host call's result
(``Engine.train_steps``); the user-facing outfeed is ``ipu.runtime.loops.IPUOutfeedQueue``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


class ReplicaFeed:
    """One replica's micro-batches of a host call, as views into the host's batches."""

    def __init__(self, steps: Sequence[tuple[np.ndarray, np.ndarray]] = ()) -> None:
        self._items: Iterator[tuple[np.ndarray, np.ndarray]] = iter(())
        self.num_micro_batches = 0  # per step
        if steps:
            self.load(steps)

    def load(self, steps: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Host side: ``steps`` of (uint8 images [A, M, H, W, C], labels [A, M]) for this replica."""
        images = steps[0][0]
        for x, _ in steps:
            if x.dtype != np.uint8:
                raise ValueError(f"the infeed takes uint8 images (normalised on the device), got {x.dtype}: "
                                 "pass the loader's raw batches, not normalised floats")
            if x.shape != images.shape:
                raise ValueError(f"every step of a host call needs the same shape, got {x.shape} and {images.shape}")
        self.num_micro_batches = images.shape[0]
        self._items = ((x[a], y[a]) for x, y in steps for a in range(x.shape[0]))

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """Device side: the next micro-batch (uint8 images [M, H, W, C], labels [M])."""
        try:
            return next(self._items)
        except StopIteration:
            raise RuntimeError("the replica read past the micro-batches the host loaded for this call") from None
