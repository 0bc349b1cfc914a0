"""Measured choices between a hand kernel and BLAS, per machine and shape (as FFTW's wisdom).

Where a product can go through a hand kernel or through BLAS, which is faster depends on the CPU,
its BLAS and the shape: the hand kernels were tuned on AMD Zen, and no rule on the shape alone
holds on every CPU. So the first time this machine meets a shape, :func:`choose` times every
formulation on the call's own operands (each run once to warm up, then best of ``REPEATS``, in
one thread's CPU time, see :func:`_measure`), records the fastest, and every later call and every
later run on this machine takes the recorded choice. A given machine therefore computes the same
bits on every run (the choice never changes once made, whatever the thread count or load), while
the first run on a new CPU model measures.

The file (``jit.wisdom_path``: ``POPRUN_WISDOM``, by default in the user's cache folder) holds one
section per machine, keyed by :func:`machine`: the CPU model, the CPU numba compiles for with its
vector registers, and the BLAS library and kernel; a shared home folder serves a cluster's hosts of
one CPU model alike. It is read and written under an exclusive lock (``fcntl.flock``), and
replaced atomically, so that instances started together on one host measure a shape once and all
take the same choice. ``POPRUN_WISDOM=off`` measures nothing: the fixed rules on the shape
(the ``rule`` argument) decide, as in the test suite. :func:`used` lists the choices this process
took, for the run's record.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jit as _jit

logger = logging.getLogger(__name__)
REPEATS = 3
VERSION = 1
_lock = threading.Lock()
_known: dict[str, dict] = {}  # this machine's entries, as read or measured
_used: dict[str, dict] = {}  # the entries this process took
_measured: list[str] = []  # the keys this process measured
_inside = threading.local()  # .measuring: this thread is running candidates
_taken: dict[tuple, dict] = {}  # (file, kind, shape, candidates) -> the entry taken, for the calls after the first


@functools.cache
def machine() -> str:
    """This machine's key: CPU model (family, model, stepping), numba's target CPU and registers, BLAS."""
    import numba
    from llvmlite import binding

    from models.kernels import gemm

    cpu = _jit.cpu_model(stepping=True)
    count, lanes = _jit.vector_registers()
    target = numba.config.CPU_NAME or binding.get_host_cpu_name()
    return f"{cpu}; numba {target}, {count} x {32 * lanes}-bit registers; {gemm.describe()}"


def enabled() -> bool:
    """Whether choices are measured and recorded (``POPRUN_WISDOM`` is not ``off``)."""
    return _jit.wisdom_path() is not None


def choose(kind: str, shape: tuple[int, ...], candidates: dict[str, Callable[[], object]], rule: str) -> str:
    """The name of the formulation that ``kind`` of ``shape`` goes through: the recorded choice,
    else the fastest of ``candidates`` measured now (each computes the same product into the
    caller's buffers, which the chosen one then overwrites; a tie goes to the first listed);
    ``rule`` where wisdom is off, where only one candidate exists, or inside a candidate being
    measured (a layer's path tried whole meets its weight-gradient choice: the rule decides there)."""
    path = _jit.wisdom_path()
    if path is None or len(candidates) == 1 or getattr(_inside, "measuring", False):
        return rule  # (a candidate that meets another choice takes its rule: the file's lock is held)
    fast = (path, kind, shape, *candidates)
    entry = _taken.get(fast)
    if entry is not None:  # (every product of every step asks: no string, no lock once taken)
        return entry["choice"]
    key = f"{kind} {'x'.join(map(str, shape))} {'/'.join(candidates)}"
    with _lock:
        entry = _known.get(key)
        if entry is None:
            with _locked(path):
                _known.update(_read(path).get(machine(), {}))
                entry = _known.get(key)
                if entry is None:
                    if not _measured:
                        logger.info("kernel wisdom: timing the kernels once for each shape this machine has not "
                                    "met (%s)", path)
                    entry = _known[key] = _measure(candidates)
                    _measured.append(key)
                    _write(path, key, entry)
                    logger.debug("kernel wisdom: %s through %s (%s)", key, entry["choice"],
                                 ", ".join(f"{k} {v:.3f} ms" for k, v in entry["ms"].items()))
        _used[key] = entry
        _taken[fast] = entry
    return entry["choice"]


def forget() -> None:
    """Drop what this process knows of the file's choices, as a new process starts (the next call of
    each shape reads the file again)."""
    with _lock:
        _known.clear()
        _taken.clear()


def used() -> dict[str, dict]:
    """The choices this process took: {kind, shape and candidates: {choice, ms per candidate}} (for
    the run record)."""
    with _lock:
        return dict(_used)


def best_ms(fn: Callable[[], object], repeats: int = REPEATS, clock: Callable[[], float] = time.perf_counter) -> float:
    """The best of ``repeats`` timed runs of ``fn`` after one untimed run, in milliseconds of ``clock``."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times) * 1e3


def _measure(candidates: dict[str, Callable[[], object]]) -> dict:
    """Each candidate's best time on one thread, in CPU time of the calling thread: a parallel region
    on a loaded host waits a scheduler slice for a descheduled thread (times in multiples of 4-8 ms
    were seen with another job on the cores), and so would wall time; one thread's CPU time counts
    the work alone. On one thread every kernel runs on the calling thread."""
    from models.kernels import threads as _threads

    before = _threads.get_num_threads()
    _threads.set_num_threads(1)
    _inside.measuring = True
    try:
        ms = {name: round(best_ms(fn, clock=time.thread_time), 4) for name, fn in candidates.items()}
    finally:
        _inside.measuring = False
        _threads.set_num_threads(before)
    return {"choice": min(ms, key=lambda name: (ms[name], list(ms).index(name))), "ms": ms}


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise RuntimeError(f"kernel wisdom {path}: unreadable ({e}); delete it (it is measured again) or set "
                           f"{_jit.WISDOM_VARIABLE} to another file or to 'off'") from e
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("machines"), dict):
        raise RuntimeError(f"kernel wisdom {path}: not a version-{VERSION} wisdom file; delete it (it is measured "
                           f"again) or set {_jit.WISDOM_VARIABLE} to another file or to 'off'")
    return data["machines"]


def _write(path: Path, key: str, entry: dict) -> None:
    """Add one entry to this machine's section (under the caller's lock), replacing the file atomically."""
    machines = _read(path)
    machines.setdefault(machine(), {})[key] = entry
    _replace(path, machines)


def _replace(path: Path, machines: dict) -> None:
    """Write the file anew through a temporary file in its folder (under the caller's lock)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"version": VERSION, "machines": machines}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def recorded() -> dict[str, dict]:
    """This machine's entries in the file ({} when there are none or wisdom is off)."""
    path = _jit.wisdom_path()
    if path is None:
        return {}
    with _locked(path):
        return _read(path).get(machine(), {})


def drop() -> int:
    """Remove this machine's section from the file (the next run measures again); the count removed."""
    path = _jit.wisdom_path()
    if path is None:
        return 0
    with _locked(path):
        machines = _read(path)
        gone = machines.pop(machine(), {})
        if gone:
            _replace(path, machines)
    forget()
    return len(gone)


__all__ = ["REPEATS", "best_ms", "choose", "drop", "enabled", "forget", "machine", "recorded", "used"]

