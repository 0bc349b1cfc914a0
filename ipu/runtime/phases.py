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


def critical_path(model_s: list[float], all_reduce_s: list[float], update_s: list[float]) -> dict:
    """Each instance's model, all-reduce and update seconds over the same updates -> the instance
    the others wait for and what the update costs outside the model on it.

    Updates end together, so an instance that finishes its model early waits in the all-reduce
    for the slowest: the instance that spends least there (``critical_instance``) is the one the
    others wait for, and ``1 - model / update`` on it (``critical_outside_model_share``) is what
    the training path costs around the model, without the others' wait. ``instance_wait_share``:
    each instance's all-reduce seconds beyond the critical one's, as a share of its update time
    (the imbalance between instances, the host's doing, not the training path's).
    """
    if not model_s or len(model_s) != len(all_reduce_s) or len(model_s) != len(update_s):
        raise ValueError(f"critical_path: need one model, all-reduce and update time per instance, got "
                         f"{len(model_s)}, {len(all_reduce_s)} and {len(update_s)}")
    j = min(range(len(all_reduce_s)), key=all_reduce_s.__getitem__)
    if update_s[j] <= 0:
        return {}
    return {"critical_instance": j, "critical_outside_model_share": 1.0 - model_s[j] / update_s[j],
            "instance_wait_share": [(a - all_reduce_s[j]) / u if u > 0 else 0.0
                                    for a, u in zip(all_reduce_s, update_s)]}


__all__ = ["PHASES", "PhaseTimes", "critical_path", "shares"]
