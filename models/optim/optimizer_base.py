"""The shared machinery of every optimizer: per-parameter state, scratch buffers, checkpoints.

An optimizer owns a ``list[Param]`` and, on ``step(lr)``, updates each ``param.data`` in
place from ``param.grad``. Subclasses write only the update rule, as two small methods:

* ``init_state(param) -> dict[str, np.ndarray]``: the slots this rule keeps for one parameter
  (momentum, first and second moments, ...), allocated once, in the parameter's dtype;
* ``update(param, state, lr)``: one in-place update of one parameter.

Temporaries come from preallocated scratch buffers (``self.scratch(param, i)``), so a step
allocates no parameter-sized arrays. ``param.grad`` is never modified: the engine may still
need it (gradient norms, logging), and TF's optimizers leave gradients alone too.

Checkpoints use flat keys that HDF5 and safetensors accept: ``step`` (an int) and
``<slot>/<param name>`` (an array), for example ``momentum/features.0.0.weight``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from models.param import Param

StateDict = dict[str, "np.ndarray | float | int"]


class Optimizer:
    """Base class: subclasses set ``num_scratch`` and implement ``init_state`` and ``update``."""

    num_scratch: int = 1

    def __init__(self, params: Sequence[Param]) -> None:
        self.params: list[Param] = list(params)
        check_params(self.params)
        self.num_updates = 0
        self.state: dict[str, dict[str, np.ndarray]] = {
            p.name: self.init_state(p) for p in self.params
        }
        self._scratch = _make_scratch(self.params, self.num_scratch)

    def init_state(self, param: Param) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def update(self, param: Param, state: dict[str, np.ndarray], lr: float) -> None:
        raise NotImplementedError

    def step(self, lr: float) -> None:
        """Apply one update to every parameter with learning rate ``lr`` (from the schedule)."""
        self.check_lr(lr)
        self.num_updates += 1
        for p in self.params:
            self.update(p, self.state[p.name], lr)

    @staticmethod
    def check_lr(lr: float) -> None:
        if not math.isfinite(lr) or lr < 0.0:
            raise ValueError(
                f"learning rate {lr!r} is not a finite number >= 0; check the schedule "
                "(base_lr, warmup, end_ratio) that produced it"
            )

    def scratch(self, param: Param, index: int, dtype: np.dtype | None = None) -> np.ndarray:
        """A preallocated temporary shaped like ``param.data`` (contents undefined)."""
        buf = self._scratch[np.dtype(dtype or param.data.dtype)]
        return buf[index, : param.data.size].reshape(param.data.shape)

    def state_dict(self) -> StateDict:
        """Copies of the step count and every slot, under flat ``<slot>/<param name>`` keys."""
        out: StateDict = {"step": int(self.num_updates)}
        for name, slots in self.state.items():
            for slot, arr in slots.items():
                out[f"{slot}/{name}"] = arr.copy()
        return out

    def load_state_dict(self, d: Mapping[str, object]) -> None:
        """Restore from ``state_dict()`` output (possibly read back from HDF5/safetensors)."""
        expected = {f"{slot}/{name}" for name, slots in self.state.items() for slot in slots}
        expected.add("step")
        check_keys(type(self).__name__, expected, set(d))
        for name, slots in self.state.items():
            for slot, arr in slots.items():
                key = f"{slot}/{name}"
                src = np.asarray(d[key])
                if src.shape != arr.shape:
                    raise ValueError(
                        f"optimizer state {key!r} has shape {src.shape}, the parameter has "
                        f"{arr.shape}; the checkpoint was written for a different model"
                    )
                np.copyto(arr, src, casting="same_kind")
        self.num_updates = int(np.asarray(d["step"]))


def check_params(params: Sequence[Param]) -> None:
    """Reject what would silently corrupt an update: duplicate names, non-float or mis-shaped grads."""
    seen: set[str] = set()
    for p in params:
        if not isinstance(p, Param):
            raise TypeError(f"optimizers take models.param.Param objects, got {type(p).__name__}")
        if p.name in seen:
            raise ValueError(f"parameter name {p.name!r} appears twice; optimizer state is keyed by name")
        seen.add(p.name)
        if p.data.dtype.kind != "f":
            raise ValueError(f"parameter {p.name!r} has dtype {p.data.dtype}; optimizers need floats")
        if p.grad.shape != p.data.shape or p.grad.dtype != p.data.dtype:
            raise ValueError(
                f"parameter {p.name!r}: grad is {p.grad.dtype}{p.grad.shape} but data is "
                f"{p.data.dtype}{p.data.shape}; allocate grad with np.zeros_like(data)"
            )


def check_keys(owner: str, expected: set[str], got: set[str]) -> None:
    """Raise a ValueError naming missing and unexpected checkpoint keys."""
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    if missing or unexpected:
        raise ValueError(
            f"{owner} state does not match: missing keys {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected keys {unexpected[:5]}"
            f"{' ...' if len(unexpected) > 5 else ''}; load a checkpoint written by the same "
            "optimizer kind for the same model"
        )


def _make_scratch(params: Sequence[Param], count: int) -> dict[np.dtype, np.ndarray]:
    """One ``(count, largest param size)`` buffer per parameter dtype, plus float32 for norms."""
    sizes: dict[np.dtype, int] = {}
    for p in params:
        sizes[p.data.dtype] = max(sizes.get(p.data.dtype, 0), p.data.size)
    if np.dtype(np.float16) in sizes:  # LARS norms of float16 weights are taken in float32
        f32 = np.dtype(np.float32)
        sizes[f32] = max(sizes.get(f32, 0), sizes[np.dtype(np.float16)])
    return {dt: np.empty((max(count, 1), n), dtype=dt) for dt, n in sizes.items()}
