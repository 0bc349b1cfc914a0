"""Where the time of a weight update goes: seconds per phase, summed over a run.

The engine and the replicas add to one ``PhaseTimes`` (the training loop adds the input wait and
the metrics it writes), so that a run can say what share of its update time went to the model
and what share went around it. The phases:

``input_wait``
    the training thread blocked on the loader (the host did not keep up with the device);
``normalise``
    the device's first operations: uint8 to float, normalisation, mixup and cutmix;
``model``
    forward, loss and backward of the model (for a pipelined replica: the whole pipeline);
``gradient_sum``
    adding each micro-batch's gradients into the engine's flat buffer;
``all_reduce``
    the gradient all-reduce across instances;
``optimizer``
    mean and unscale, the finiteness check, the optimizer step, the EMA, the weight checksum;
``precision_emulation``
    float16 rounding of inputs, weights, partials and stored weights (``ipu.emulate_precision``);
``metrics``
    the metrics all-reduce, the outfeed and what the training loop writes (JSON lines, the bar).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = ("input_wait", "normalise", "model", "gradient_sum", "all_reduce", "optimizer", "precision_emulation",
          "metrics")


class PhaseTimes:
    """Seconds per phase (``PHASES``), accumulated with :meth:`add` or :meth:`measure`."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def add(self, phase: str, seconds: float) -> None:
        if phase not in self.seconds:
            raise ValueError(f"unknown phase {phase!r}: choose one of {', '.join(PHASES)}")
        self.seconds[phase] += seconds

    @contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(phase, time.perf_counter() - start)

    def __iadd__(self, other: "PhaseTimes") -> "PhaseTimes":
        for phase, seconds in other.seconds.items():
            self.seconds[phase] += seconds
        return self


def shares(seconds: dict[str, float], update_seconds: float) -> dict[str, float]:
    """Each phase's share of ``update_seconds``, plus ``other`` (what no phase measured) and
    ``outside_model`` (everything but ``model``)."""
    if update_seconds <= 0:
        return {}
    out = {phase: seconds.get(phase, 0.0) / update_seconds for phase in PHASES}
    out["other"] = max(0.0, 1.0 - sum(out.values()))
    out["outside_model"] = 1.0 - out["model"]
    return out


__all__ = ["PHASES", "PhaseTimes", "shares"]
