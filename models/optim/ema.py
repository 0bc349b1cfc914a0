"""Exponential moving average of the weights, for evaluation.

    shadow <- decay * shadow + (1 - decay) * w        (written as shadow -= (1-decay)(shadow - w))

The shadows start as copies of the weights. Two recipes use it differently, and the caller
chooses by when it calls ``update()``:

* EfficientNet (tensorflow/tpu): every weight update, decay 0.9999, with
  ``use_num_updates=True`` so the effective decay is ``min(decay, (1 + n) / (10 + n))``
  (TF ``ExponentialMovingAverage(num_updates=...)``), which lets early averages forget the
  random initialisation fast.
* Graphcore G16 (``weight_avg_exp: [0.97]``): once per epoch, on the host, in float64
  (``dtype=np.float64``).

``averaged()`` swaps the averages into the parameters for evaluation and restores them after.
BN moving statistics are not parameters here; GroupNorm, which the recipe uses, has none.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from models.optim.optimizer_base import StateDict, check_keys, check_params
from models.param import Param


class ExponentialMovingAverage:
    """Shadow copies of ``params``, updated in place by ``update()``."""

    def __init__(
        self,
        params: Sequence[Param],
        decay: float,
        *,
        dtype: np.dtype | type | None = None,
        use_num_updates: bool = False,
    ) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay={decay!r} must be in [0, 1) (EfficientNet: 0.9999, Graphcore: 0.97)")
        self.params = list(params)
        check_params(self.params)
        self.decay = float(decay)
        self.use_num_updates = use_num_updates
        self.num_updates = 0
        self.shadow = {p.name: p.data.astype(dtype or p.data.dtype, copy=True) for p in self.params}
        largest = max((s.size for s in self.shadow.values()), default=0)
        self._tmp = {s.dtype: np.empty(largest, dtype=s.dtype) for s in self.shadow.values()}

    def current_decay(self) -> float:
        """The decay the next ``update()`` will use."""
        if self.use_num_updates:
            n = self.num_updates
            return min(self.decay, (1.0 + n) / (10.0 + n))
        return self.decay

    def update(self) -> None:
        """Move every shadow towards its parameter's current value."""
        rate = 1.0 - self.current_decay()
        for p in self.params:
            shadow = self.shadow[p.name]
            tmp = self._tmp[shadow.dtype][: shadow.size].reshape(shadow.shape)
            np.subtract(shadow, p.data, out=tmp, casting="unsafe")
            tmp *= rate
            shadow -= tmp
        self.num_updates += 1

    def copy_to(self, params: Sequence[Param] | None = None) -> None:
        """Write the averages into ``params`` (default: the tracked ones), cast to their dtype."""
        for p in self.params if params is None else params:
            if p.name not in self.shadow:
                raise ValueError(f"EMA has no average for parameter {p.name!r}")
            np.copyto(p.data, self.shadow[p.name], casting="unsafe")

    @contextmanager
    def averaged(self) -> Iterator[None]:
        """Evaluate with the averaged weights inside the ``with`` block; restore them after."""
        backup = {p.name: p.data.copy() for p in self.params}
        self.copy_to()
        try:
            yield
        finally:
            for p in self.params:
                np.copyto(p.data, backup[p.name])

    def state_dict(self) -> StateDict:
        out: StateDict = {"num_updates": int(self.num_updates)}
        for name, arr in self.shadow.items():
            out[f"ema/{name}"] = arr.copy()
        return out

    def load_state_dict(self, d: Mapping[str, object]) -> None:
        expected = {f"ema/{name}" for name in self.shadow} | {"num_updates"}
        check_keys("ExponentialMovingAverage", expected, set(d))
        for name, arr in self.shadow.items():
            src = np.asarray(d[f"ema/{name}"])
            if src.shape != arr.shape:
                raise ValueError(f"EMA state 'ema/{name}' has shape {src.shape}, the parameter has {arr.shape}")
            np.copyto(arr, src, casting="same_kind")
        self.num_updates = int(np.asarray(d["num_updates"]))
