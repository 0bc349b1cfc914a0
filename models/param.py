"""A trainable parameter: its value, its gradient and how optimizers should treat it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Param:
    """One trainable tensor.

    name: the key under which it appears in the model's state_dict (torchvision naming,
        for example ``features.0.1.weight``); optimizer state is keyed by it too.
    data: the value, float32 (float64 in gradient checks); optimizers update it in place.
    grad: same shape and dtype; layers *write* (not add) it in ``backward``; the engine
        accumulates across micro-batches and replicas in its own buffers.
    kind: ``weight`` (conv or dense kernel), ``bias``, ``norm_scale`` or ``norm_offset``.
        LARS and weight decay skip everything but ``weight`` (the TF rule skips names with
        beta/gamma/bias).
    """

    name: str
    data: np.ndarray
    kind: str = "weight"
    grad: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.kind not in ("weight", "bias", "norm_scale", "norm_offset"):
            raise ValueError(f"parameter {self.name!r}: unknown kind {self.kind!r}")
        self.grad = np.zeros_like(self.data)

    def __setattr__(self, name: str, value) -> None:
        if name in ("data", "grad") and self.__dict__.get(name) is not value:  # not ``p.data += x``
            _GENERATION[0] += 1  # another array: what was derived from the old one is stale
        object.__setattr__(self, name, value)

    @property
    def decays(self) -> bool:
        """Whether weight decay and the LARS trust ratio apply to this parameter."""
        return self.kind == "weight"


_GENERATION = [0]


def generation() -> int:
    """A number that changes whenever any parameter's ``data`` or ``grad`` is bound to another
    array. What a training step derives from the parameters' arrays (one view over every gradient,
    the optimizer's compiled lists) stays valid while it is unchanged: one integer to compare
    instead of a walk over every parameter (20-40 us for efficientnet-tiny's 96)."""
    return _GENERATION[0]


def pack_grads(params: list[Param]) -> np.ndarray | None:
    """Make the gradients of ``params`` consecutive views of one buffer, in order, and return it
    (None when the parameters do not share one dtype). Whoever sums or copies every gradient
    (a replica adding its partials, the engine handing the reduced gradient to the optimizer)
    then makes one array operation instead of one per parameter. Layers look ``param.grad`` up
    at each backward, so the new views take over; the values are kept."""
    if not params or len({p.data.dtype for p in params}) != 1:
        return None
    flat = np.empty(sum(p.data.size for p in params), params[0].data.dtype)
    offset = 0
    for p in params:
        view = flat[offset:offset + p.data.size].reshape(p.data.shape)
        np.copyto(view, p.grad)
        p.grad = view
        offset += p.data.size
    return flat


_SPANS: dict[tuple[int, ...], tuple[list, np.ndarray | None]] = {}
_MAX_SPANS = 16


def span(arrays) -> np.ndarray | None:
    """One 1-D view over ``arrays`` when they lie back to back in one buffer (C-contiguous, same
    dtype, each starting where the previous ends), else None. Remembered per list of array
    objects: a training step asks about the same lists every time, and the check itself costs
    microseconds per array. The cache holds the arrays it answered for (at most ``_MAX_SPANS``
    lists, the oldest dropped first), so while an answer is cached its ids are still those
    arrays': a hit is one dictionary lookup."""
    key = tuple(map(id, arrays))
    hit = _SPANS.get(key)
    if hit is not None:
        return hit[1]
    found = _span(arrays)
    if len(_SPANS) >= _MAX_SPANS:
        _SPANS.pop(next(iter(_SPANS)))
    view = None if found is None else found[0].reshape(-1)[found[1]:found[1] + found[2]]
    _SPANS[key] = (list(arrays), view)
    return view


def _span(arrays) -> tuple[np.ndarray, int, int] | None:
    """(base buffer, offset, size) of ``arrays`` back to back in one buffer, else None."""
    if not arrays:
        return None
    first = arrays[0]
    base, dtype = first, first.dtype
    while base.base is not None:
        base = base.base
    if not isinstance(base, np.ndarray) or base.dtype != dtype or not base.flags.c_contiguous:
        return None
    start = first.ctypes.data
    end = start
    for a in arrays:
        if a.dtype != dtype or not a.flags.c_contiguous or a.ctypes.data != end:
            return None
        end += a.nbytes
    return base, (start - base.ctypes.data) // dtype.itemsize, (end - start) // dtype.itemsize
