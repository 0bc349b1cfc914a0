"""Injected faults, for recovery tests: one instance is killed or stopped at an exact point.

``POPRUN_FAULT="instance=1,at=step 7,signal=KILL"`` in the launcher's environment (every
instance inherits it) makes instance 1 send itself SIGKILL right after it reports the progress
``step 7`` (the training engine reports ``step N`` once weight update N is done, and
``launch.train.checkpoint`` reports ``checkpoint N: writing`` and ``checkpoint N: renaming``), in the
first attempt only (``attempt=K`` picks another value of ``POPRUN_RESTART_COUNT``). ``signal=STOP``
freezes the instance instead, a hang for ``--hang-timeout`` to catch. ``signal=WAIT`` sends no
signal: the instance waits there until SIGUSR1 reaches it (which the program's own handler then
records, as ``poprun-train``'s stop request does), so that a test knows at which update a stop
request lands; call ``report_progress`` from the main thread for it. ``instance=*`` hits every
instance. Before the signal (or the wait), one line goes to stderr with the wall-clock time, so a
harness can time the recovery (``bench/chaos.py``) or send its signal once every instance waits.

Nothing happens without the variable; ``poprun_py.progress`` checks each report against it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass

from poprun_py.errors import signal_name

FORMAT = "instance=I|*,at=PROGRESS TEXT,signal=KILL|STOP|TERM|...|WAIT[,attempt=K]"
INJECTED = "poprun_py: injected fault"  # the start of the line written before the signal
WAIT = 0  # signal=WAIT: no signal is sent; the instance waits until SIGUSR1 arrives
EVERY = None  # instance=*: every instance


@dataclass(frozen=True)
class Fault:
    instance: int | None  # None (EVERY, ``instance=*``): every instance
    at: str  # the progress report that triggers it, exactly as reported ("step 7")
    signal: int = signal.SIGKILL  # or WAIT
    attempt: int = 0  # the POPRUN_RESTART_COUNT it fires in

    def encode(self) -> str:
        """The ``POPRUN_FAULT`` value for this fault."""
        return f"instance={_who(self.instance)},at={self.at},signal={_signal_text(self.signal)},attempt={self.attempt}"

    def hits(self, instance: int, attempt: int) -> bool:
        return self.instance in (EVERY, instance) and self.attempt == attempt


def _who(instance: int | None) -> str:
    return "*" if instance is EVERY else str(instance)


def _signal_text(number: int) -> str:
    return "WAIT" if number == WAIT else signal.Signals(number).name[3:]


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
        instance = EVERY if fields["instance"] == "*" else int(fields["instance"])
        attempt = int(fields.get("attempt", "0"))
    except ValueError:
        raise ValueError(f"instance= and attempt= take integers; write {FORMAT}") from None
    return Fault(instance, fields["at"], _signal(fields.get("signal", "KILL")), attempt)


def _signal(name: str) -> int:
    upper = name.upper()
    if upper == "WAIT":
        return WAIT
    try:
        return int(signal.Signals[upper if upper.startswith("SIG") else "SIG" + upper])
    except KeyError:
        raise ValueError(f"signal={name!r} is not a signal name (KILL, STOP, TERM, SEGV, ..., or WAIT)") from None


def fire(fault: Fault) -> None:
    """Say what is about to happen (stderr, with the time), then signal this process (or wait)."""
    if fault.signal == WAIT:
        _wait_for_usr1(fault)
        return
    _say(fault, f"{signal_name(fault.signal)} to")
    os.kill(os.getpid(), fault.signal)


def _say(fault: Fault, what: str) -> None:
    sys.stderr.write(f"{INJECTED}: {what} instance {_who(fault.instance)} (pid {os.getpid()}) at {fault.at!r}, "
                     f"attempt {fault.attempt}, t={time.time():.3f}\n")
    sys.stderr.flush()


def _wait_for_usr1(fault: Fault) -> None:
    """Block until SIGUSR1 reaches this process (main thread only). The interpreter writes each
    arriving signal's number to the wakeup pipe (``signal.set_wakeup_fd``), in place before the line
    that announces the wait; the program's own handler has run (or runs next) when this returns."""
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write)
    try:
        _say(fault, "SIGUSR1 awaited by")
        while signal.SIGUSR1 not in os.read(read, 64):
            pass
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read)
        os.close(write)
