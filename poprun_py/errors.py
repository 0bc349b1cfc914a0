"""Exceptions and exit codes shared by the launcher, the agent and the runtime."""

from __future__ import annotations

import signal

EXIT_USAGE = 2  # bad options: nothing was started
EXIT_HANG = 124  # --hang-timeout fired (the code timeout(1) uses)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM


class ConfigError(ValueError):
    """A launch option is invalid; the message says which and how to fix it."""


class EnvironmentContractError(ValueError):
    """The POPDIST_* variables an instance received are inconsistent."""


def plural(count: int, noun: str, nouns: str | None = None, *, with_count: bool = True) -> str:
    """``1 replica``, ``2 replicas`` (``with_count=False``: the noun alone, for ``instances 0, 3``)."""
    word = noun if count == 1 else (nouns or noun + "s")
    return f"{count} {word}" if with_count else word


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


_SIGKILL_HINTS = {
    True: "killed: out of memory (the kernel's OOM killer: the oom_kill count of its memory cgroup rose); "
    "lower the micro-batch or the number of instances per host",
    False: "killed by SIGKILL from a process, not by the OOM killer (the oom_kill count of its memory cgroup "
    "did not change): a user, a scheduler or the program itself sent it",
    None: "killed by SIGKILL: either the kernel's OOM killer or another process (no cgroup oom_kill count to "
    "tell them apart); check `dmesg` for 'Out of memory'",
}

_SIGNAL_HINTS = {
    signal.SIGSEGV: "segmentation fault in native code; the faulthandler traceback, if any, is in its stderr",
    signal.SIGBUS: "bus error in native code (often a truncated memory-mapped file)",
    signal.SIGABRT: "aborted by native code (an assertion or std::terminate in a C/C++ library)",
    signal.SIGFPE: "floating-point exception in native code",
    signal.SIGTERM: "terminated by SIGTERM from outside the job (a scheduler or a user)",
    signal.SIGINT: "interrupted (SIGINT)",
}


def exit_hint(exit_code: int | None, signum: int | None, oom_killed: bool | None = None) -> str:
    """A one-line explanation of how a process ended, with a likely cause. ``oom_killed``: whether
    the OOM killer ended it (``poprun_py.oom``), None when unknown."""
    if signum is None and exit_code is not None and exit_code > 128 and (
            exit_code - 128 in _SIGNAL_HINTS or exit_code - 128 == signal.SIGKILL):
        signum = exit_code - 128  # a shell in between turns a signal into 128+N
    if signum == signal.SIGKILL:
        return _SIGKILL_HINTS[oom_killed]
    if signum is not None:
        return _SIGNAL_HINTS.get(signum, f"ended by {signal_name(signum)}")
    if exit_code == 0:
        return "exited normally"
    return "the program exited with a non-zero status; its traceback or last stderr lines are below"


def describe_end(exit_code: int | None, signum: int | None) -> str:
    if signum is not None:
        return f"killed by {signal_name(signum)}"
    return f"exit code {exit_code}"


def shell_code(exit_code: int | None, signum: int | None) -> int:
    """The exit status a shell would show for this ending (128+N for signal N)."""
    if signum is not None:
        return 128 + signum
    return 1 if exit_code is None else exit_code
