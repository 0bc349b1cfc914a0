"""Kernel compilation as it happens: numba's compile events, counted and timed.

Numba compiles a kernel the first time it is called with new argument types, unless its on-disk
cache (``__pycache__`` beside the source, or ``NUMBA_CACHE_DIR``) holds it for this CPU already.
On a machine's first run that is minutes of silence before the first update; :class:`CompileWatch`
sees it begin (``on_first``: say so once) and adds up its seconds. It counts the kernels numba
keeps in that cache (``cache=True``, every kernel of :func:`jit.jit`), not numba's own helpers
that it compiles in every process (``numba.typed.List``'s methods). A compile that another one
starts (a kernel calling a kernel) is inside the outer one's time and count; compiles on two
threads at once (the loader's thread and the main one) both count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from numba.core import event
from numba.core.caching import NullCache


def cached_on_disk(dispatcher) -> bool:
    """True for a kernel numba keeps in its on-disk cache (compiled once per machine)."""
    return not isinstance(getattr(dispatcher, "_cache", None), (NullCache, type(None)))


class CompileWatch(event.Listener):
    """Counts the kernels numba compiles from :meth:`start` on, and their seconds."""

    def __init__(self, on_first: Callable[[], None] | None = None, counts: Callable = cached_on_disk) -> None:
        self.on_first, self.counts = on_first, counts
        self.count = 0  # outermost compiles of counted kernels (each signature once)
        self.seconds = 0.0  # outermost compiles, summed over threads
        self._lock = threading.Lock()
        self._local = threading.local()
        self._started = False

    def start(self) -> CompileWatch:
        event.register("numba:compile", self)
        return self

    def stop(self) -> None:
        event.unregister("numba:compile", self)

    def on_start(self, ev: event.Event) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth:
            return
        self._local.counted = self.counts(ev.data["dispatcher"])
        if not self._local.counted:
            return
        self._local.began = time.perf_counter()
        with self._lock:
            first, self._started = not self._started, True
        if first and self.on_first is not None:
            self.on_first()

    def on_end(self, ev: event.Event) -> None:
        self._local.depth -= 1
        if self._local.depth or not self._local.counted:
            return
        with self._lock:
            self.count += 1
            self.seconds += time.perf_counter() - self._local.began


__all__ = ["CompileWatch", "cached_on_disk"]
