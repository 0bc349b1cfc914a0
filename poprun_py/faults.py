"""Injected faults, for recovery tests: one instance is killed or stopped at an exact point.

``POPRUN_FAULT="instance=1,at=step 7,signal=KILL"`` in the launcher's environment (every
instance inherits it) makes instance 1 send itself SIGKILL right after it reports the progress
``step 7`` (the training engine reports ``step N`` once weight update N is done, and
``launch.checkpoint`` reports ``checkpoint N: writing`` and ``checkpoint N: renaming``), in the
first attempt only (``attempt=K`` picks another value of ``POPRUN_RESTART_COUNT``). ``signal=STOP``
freezes the instance instead, a hang for ``--hang-timeout`` to catch. Before the signal, one line
goes to stderr with the wall-clock time, so a harness can time the recovery (``bench/chaos.py``).

Nothing happens without the variable; ``poprun_py.progress`` checks each report against it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

FORMAT = "instance=I,at=PROGRESS TEXT,signal=KILL|STOP|TERM|...[,attempt=K]"
INJECTED = "poprun_py: injected fault"  # the start of the line written before the signal


@dataclass(frozen=True)
class Fault:
    instance: int
    at: str  # the progress report that triggers it, exactly as reported ("step 7")
    signal: int = signal.SIGKILL
    attempt: int = 0  # the POPRUN_RESTART_COUNT it fires in

    def encode(self) -> str:
        """The ``POPRUN_FAULT`` value for this fault."""
        return f"instance={self.instance},at={self.at},signal={signal.Signals(self.signal).name[3:]},attempt={self.attempt}"


def parse_fault(text: str) -> Fault:
    """``instance=1,at=step 7,signal=KILL`` -> Fault; ValueError naming the problem and the format."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise ValueError(f"{part!r} is not key=value; write {FORMAT}")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"instance", "at", "signal", "attempt"}
    if unknown or "instance" not in fields or "at" not in fields:
        raise ValueError(f"needs instance= and at= (unknown: {sorted(unknown)}); write {FORMAT}")
    try:
        instance, attempt = int(fields["instance"]), int(fields.get("attempt", "0"))
    except ValueError:
        raise ValueError(f"instance= and attempt= take integers; write {FORMAT}") from None
    return Fault(instance, fields["at"], _signal(fields.get("signal", "KILL")), attempt)


def _signal(name: str) -> int:
    upper = name.upper()
    try:
        return int(signal.Signals[upper if upper.startswith("SIG") else "SIG" + upper])
    except KeyError:
        raise ValueError(f"signal={name!r} is not a signal name (KILL, STOP, TERM, SEGV, ...)") from None


def fire(fault: Fault) -> None:
    """Say what is about to happen (stderr, with the time), then signal this process."""
    name = signal.Signals(fault.signal).name
    sys.stderr.write(f"{INJECTED}: {name} to instance {fault.instance} (pid {os.getpid()}) at {fault.at!r}, "
                     f"attempt {fault.attempt}, t={time.time():.3f}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), fault.signal)
