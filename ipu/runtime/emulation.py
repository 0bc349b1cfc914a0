"""Float16 numerics of a training run, emulated on the CPU (``ipu.emulate_precision: true``).

The CPU computes in float32. With emulation on, the values a real IPU would hold in float16 are
rounded to float16 where the IPU would round them, and kept in float32 arrays (every value
float16-representable), so the models and optimizers run unchanged:

* ``16.32`` and ``16.16``: each replica's compute sees float16 numbers: the normalised (and
  mixed) input and the weights used in forward and backward are rounded to nearest, as an IPU
  cast does, and each replica's gradients (the partials) are rounded to nearest before they are
  added into the engine's accumulation buffer. In ``16.32`` the master weights the optimizer
  updates stay float32: the engine rounds a copy for the compute and puts the masters back.
* ``16.16``: after every optimizer step the weights are stored as float16 with stochastic
  rounding (``ipu.stochastic_rounding``, Graphcore's default for the recipe; round to nearest
  when off) and the optimizer state (momentum, moments) to nearest. The stochastic draws are a
  function of (run seed, weight update, parameter index) only, so every instance rounds
  identically (the weight checksum holds), and a resumed run rounds as the uninterrupted one.
* ``32.32``: nothing is rounded (the engine gets no emulation at all).

What is not emulated: float16 arithmetic inside the layers (their sums run in float32), the
float16 gradient-accumulation buffer of ``16.16`` (the engine's buffer stays float64 so that the
sum does not depend on the instance split), and float16 batch-norm statistics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from ipu.precision import Float16Batch, PrecisionMode, get_precision, round_to_fp16_


class HalfRounder:
    """Rounds float32 arrays in place to their nearest float16 value, as an IPU cast does.

    Contiguous arrays go through a numba kernel (no allocation, several times faster than
    numpy's float16 cast); others through numpy. Ties go to even; overflow gives inf.
    """

    def round_(self, x: np.ndarray) -> np.ndarray:
        return round_to_fp16_(x)


class PrecisionEmulation:
    """The engine's side of the emulation: rounded weights for the compute, float16 storage.

    ``params`` and ``optimizer`` are the run's; ``seed`` is the run seed (``run.seed``).
    """

    def __init__(self, mode: PrecisionMode | str, params: Sequence, optimizer, seed: int,
                 stochastic_rounding: bool = True) -> None:
        self.mode = get_precision(mode) if isinstance(mode, str) else mode
        if not self.mode.half_compute:
            raise ValueError(f"precision {self.mode.name} computes in float32: there is nothing to emulate; "
                             "use 16.32 or 16.16, or leave ipu.emulate_precision false")
        self.params, self.optimizer = list(params), optimizer
        for p in self.params:
            if p.data.dtype != np.float32 or not p.data.flags.c_contiguous:
                raise ValueError(f"parameter {p.name!r} is {p.data.dtype}, contiguous={p.data.flags.c_contiguous}: "
                                 "float16 emulation rounds contiguous float32 weights in place")
        self.seed, self.stochastic_rounding = int(seed), bool(stochastic_rounding)
        self._weights, self._state = Float16Batch(), Float16Batch()  # one kernel call per list
        self._state_arrays: list[np.ndarray] | None = None  # the optimizer's float32 slots, listed once
        # 16.32: the float32 masters, saved here while the compute runs on rounded copies
        self._masters = [np.empty_like(p.data) for p in self.params] if not self.half_weights else []

    @property
    def half_weights(self) -> bool:
        """The weights (and the optimizer state) are stored in float16 (``16.16``)."""
        return self.mode.weight_bytes == 2

    @property
    def stores_half(self) -> bool:
        """Between updates, the weights are float16 values (``16.16``): :meth:`store_initial` rounds
        them at the start (and after a checkpoint is restored), :meth:`store_update` after every
        step, and nothing else writes them (evaluation's averaged weights are swapped in and out
        around :meth:`compute_weights`, which rounds them)."""
        return self.half_weights

    def store_initial(self) -> None:
        """At start (after the broadcast): ``16.16`` stores the weights and state in float16 (nearest)."""
        if self.half_weights:
            self._weights.round_([p.data for p in self.params])
            self._round_optimizer_state()

    @contextlib.contextmanager
    def compute_weights(self) -> Iterator[None]:
        """The weights as the replicas' compute sees them: rounded to float16 (nearest).

        ``16.16`` weights are float16 values already (rounded in place, a no-op after
        :meth:`store_initial`). ``16.32`` rounds the weights in place and restores the float32
        masters afterwards, so the optimizer updates the masters.
        """
        self.round_for_compute()
        try:
            yield
        finally:
            self.restore_masters()

    def round_for_compute(self) -> None:
        """Enter :meth:`compute_weights`: round the weights (``16.32``: keep the masters first)."""
        if not self.half_weights:
            for p, master in zip(self.params, self._masters):
                np.copyto(master, p.data)
        self._weights.round_([p.data for p in self.params])

    def restore_masters(self) -> None:
        """Leave :meth:`compute_weights`: ``16.32`` puts the float32 masters back."""
        if not self.half_weights:
            for p, master in zip(self.params, self._masters):
                np.copyto(p.data, master)

    def store_update(self, update: int) -> None:
        """After optimizer step ``update`` (0-based): ``16.16`` stores the new weights in float16,
        stochastically rounded (seeded by run seed, update, parameter index), and the state to nearest."""
        if not self.half_weights:
            return
        weights = [p.data for p in self.params]
        if self.stochastic_rounding:  # parameter i draws from hash3(seed, update, i)
            self._weights.stochastic_round_(weights, self.seed, update)
        else:
            self._weights.round_(weights)
        self._round_optimizer_state()

    def _round_optimizer_state(self) -> None:
        # listed once (80 us a call for a hundred tensors): an optimizer creates its slots with
        # itself and loads checkpoints into them in place (``Optimizer.load_state_dict``)
        if self._state_arrays is None:
            self._state_arrays = [arr for slots in self.optimizer.state.values() for arr in slots.values()
                                  if arr.dtype == np.float32]
        self._state.round_(self._state_arrays)


__all__ = ["HalfRounder", "PrecisionEmulation"]
