"""Host-device data streams: infeed and outfeed queues and device iterations.

Each replica reads uint8 image batches through an infeed queue that holds up to
``prefetch_depth`` batches, and hands its losses and metrics back through an outfeed. One host
call runs ``device_iterations`` steps. The IO tiles that hold the prefetched batches are planned
by the device model (``ipu.io_tiles``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np



class InfeedQueue:
    """A bounded queue of uint8 micro-batches for one replica (``prefetch_depth`` slots)."""

    def __init__(self, batch_shape: tuple[int, ...], prefetch_depth: int = 3) -> None:
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth must be at least 1, got {prefetch_depth}")
        self.batch_shape = tuple(batch_shape)
        self.prefetch_depth = prefetch_depth
        self._items: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self.bytes_in = 0  # host-to-device bytes so far

    def __len__(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.prefetch_depth

    def put(self, images: np.ndarray, labels: np.ndarray) -> None:
        """Enqueue one micro-batch; images must be uint8 (they are normalised on the device)."""
        if images.dtype != np.uint8:
            raise ValueError(
                f"infeed takes uint8 images (normalised on the device), got {images.dtype}: "
                f"pass the loader's raw batches, not normalised floats"
            )
        if images.shape != self.batch_shape:
            raise ValueError(f"infeed expects batches of shape {self.batch_shape}, got {images.shape}")
        if self.full():
            raise RuntimeError(f"infeed is full ({self.prefetch_depth} batches): dequeue before enqueueing")
        self._items.append((images, labels))
        self.bytes_in += images.nbytes + labels.nbytes

    def get(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._items:
            raise RuntimeError("infeed is empty: the host has not enqueued the next batch")
        return self._items.popleft()

    def fill_from(self, batches: Iterator[tuple[np.ndarray, np.ndarray]]) -> int:
        """Prefetch from ``batches`` until full or exhausted; returns how many were enqueued."""
        count = 0
        while not self.full():
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            self.put(images, labels)
            count += 1
        return count


class ReplicaFeed:
    """One replica's host-to-device stream: the host's micro-batches pass through an ``InfeedQueue``.

    :meth:`load` (host side) takes one call's worth: ``device_iterations`` steps of ``A``
    micro-batches, views into the loader's arrays (nothing is copied). The device side takes them
    one at a time with :meth:`next`, which first tops the queue up to ``prefetch_depth`` (the next
    micro-batches, also across a step boundary, wait in the queue while the current one computes).
    """

    def __init__(self, prefetch_depth: int = 3) -> None:
        if prefetch_depth < 1:
            raise ValueError(f"prefetch_depth must be at least 1, got {prefetch_depth}")
        self.prefetch_depth = prefetch_depth
        self.infeed: InfeedQueue | None = None
        self._source: Iterator[tuple[np.ndarray, np.ndarray]] = iter(())
        self.num_micro_batches = 0  # per step

    def load(self, steps: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Host side: ``steps`` of (uint8 images [A, M, H, W, C], labels [A, M]) for this replica."""
        if self.infeed is not None and len(self.infeed):
            raise RuntimeError(f"infeed still holds {len(self.infeed)} micro-batches of the previous host call")
        images = steps[0][0]
        if self.infeed is None or self.infeed.batch_shape != images.shape[1:]:
            self.infeed = InfeedQueue(images.shape[1:], self.prefetch_depth)
        self.num_micro_batches = images.shape[0]
        self._source = ((x[a], y[a]) for x, y in steps for a in range(x.shape[0]))

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """Device side: the next micro-batch (uint8 images [M, H, W, C], labels [M])."""
        if self.infeed is None:
            raise RuntimeError("the host has not loaded any batches into this replica's infeed")
        self.infeed.fill_from(self._source)
        return self.infeed.get()


def array_feed(images: np.ndarray, labels: np.ndarray, prefetch_depth: int = 3) -> ReplicaFeed:
    """A feed holding one step (``images [A, M, H, W, C]``), for driving a replica directly."""
    feed = ReplicaFeed(prefetch_depth)
    feed.load([(images, labels)])
    return feed


class OutfeedQueue:
    """What the device hands back: one dict of scalar metrics per step."""

    def __init__(self) -> None:
        self._items: list[dict[str, float]] = []

    def put(self, metrics: dict[str, float]) -> None:
        self._items.append({k: float(v) for k, v in metrics.items()})

    def drain(self) -> list[dict[str, float]]:
        items, self._items = self._items, []
        return items


def run_device_iterations(
    step: Callable[[np.ndarray, np.ndarray], dict[str, float]],
    infeed: InfeedQueue,
    outfeed: OutfeedQueue,
    batches: Iterator[tuple[np.ndarray, np.ndarray]],
    device_iterations: int,
) -> list[dict[str, float]]:
    """One host call: run ``step`` ``device_iterations`` times from the infeed, return the outfeed."""
    if device_iterations < 1:
        raise ValueError(f"device_iterations must be at least 1, got {device_iterations}")
    for _ in range(device_iterations):
        infeed.fill_from(batches)
        images, labels = infeed.get()
        outfeed.put(step(images, labels))
    return outfeed.drain()
