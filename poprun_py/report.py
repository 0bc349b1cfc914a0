"""What the launcher knows about each instance of an attempt, and the reports it prints."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from poprun_py.errors import describe_end, exit_hint, plural, shell_code, signal_name
from poprun_py.faults import INJECTED

TRACEBACK_LINES = 30
STDERR_LINES = 15


@dataclass
class InstanceState:
    """One instance during an attempt, filled in from the agent's records."""

    index: int
    host: str | None = None
    pid: int | None = None
    agent_pid: int | None = None
    cpus: list[int] | None = None
    exit_code: int | None = None
    signal: int | None = None
    duration: float | None = None
    ended_at: float | None = None  # wall clock, from the agent's host
    stopped: bool = False  # ended because the launcher asked it to
    oom_killed: bool | None = None  # the OOM killer ended it (poprun_py.oom); None: unknown
    error: dict | None = None
    tail: list[str] = field(default_factory=list)
    last_activity: float = 0.0  # launcher's monotonic clock
    last_what: str = ""
    reports: int = 0
    ended: bool = False

    @property
    def failed(self) -> bool:
        return self.ended and not self.stopped and (self.signal is not None or self.exit_code != 0)

    @property
    def shell_code(self) -> int:
        return shell_code(self.exit_code, self.signal)

    def to_json(self) -> dict:
        return {
            "index": self.index, "host": self.host, "pid": self.pid, "cpus": self.cpus,
            "exit_code": self.exit_code, "signal": signal_name(self.signal) if self.signal else None,
            "duration_s": self.duration, "stopped_by_launcher": self.stopped,
            "error_type": (self.error or {}).get("type"),
        }


def failure_report(state: InstanceState, num_instances: int, log_hint: str | None, shown: bool = False) -> str:
    """The root-cause report for the first instance that failed. ``shown``: the console relayed that
    instance's output, so its error is on the screen already: the report points to it instead of
    printing its traceback or last stderr lines a second time."""
    where = f"host {state.host}, pid {state.pid}"
    dur = f" after {state.duration:.1f} s" if state.duration is not None else ""
    lines = [
        f"poprun_py: instance {state.index} of {num_instances} failed ({where}){dur}: "
        f"{describe_end(state.exit_code, state.signal)}",
        f"  cause: {_cause(state)}",
    ]
    tb = ((state.error or {}).get("traceback") or "").rstrip()
    if shown and state.signal is None:  # on the screen already: say where, do not print it again
        lines[1] = lines[1].replace("; its traceback or last stderr lines are below", "")
        lines.append(f"  its error: in the output above (its own lines are tagged [{state.index}]; an error that "
                     "every instance gives alike is shown once)")
        tb, state = "", replace(state, tail=[], error=None)
    if tb:
        lines.append(f"  traceback from instance {state.index}:")
        lines += ["    " + line for line in tb.splitlines()[-TRACEBACK_LINES:]]
    elif state.error and state.error.get("message"):
        lines.append(f"  error: {state.error['message']}")
    if state.tail and not tb:
        lines.append(f"  last stderr lines of instance {state.index}:")
        lines += ["    " + line for line in state.tail[-STDERR_LINES:]]
    if log_hint:
        lines.append(f"  full output: {log_hint}")
    return "\n".join(lines)


def _cause(state: InstanceState) -> str:
    if any(line.startswith(INJECTED) for line in state.tail):
        return "a fault injected on purpose (POPRUN_FAULT, a recovery test)"
    return exit_hint(state.exit_code, state.signal, state.oom_killed)


def hang_report(states: list[InstanceState], now: float, timeout: float) -> str:
    """Which instances made no progress for ``timeout`` seconds, and what each did last."""
    stuck = [s for s in states if not s.ended and now - s.last_activity > timeout]
    lines = [
        f"poprun_py: no progress for {timeout:g} s from {plural(len(stuck), 'instance', with_count=False)} "
        f"{', '.join(str(s.index) for s in stuck)}; stopping the job",
        "  last activity of each instance:",
    ]
    for s in states:
        if s.ended:
            what = f"ended: {describe_end(s.exit_code, s.signal)}"
        else:
            last = s.last_what or "no progress reported (output only)"
            what = f"{last} ({now - s.last_activity:.1f} s ago)"
        mark = "STUCK " if s in stuck else "      "
        lines.append(f"  {mark}instance {s.index} (host {s.host}, pid {s.pid}): {what}")
    # Those in a collective wait for those elsewhere, whichever of them reported last before the hang
    # (a race of milliseconds): the timeout decides that the job is stuck, not who is to blame.
    running = [s for s in states if not s.ended]
    waiting = [s for s in running if s.last_what.startswith("in ")]
    others = [s for s in running if s not in waiting]
    if waiting and others:
        lines.append(
            f"  likely culprit: {plural(len(others), 'instance', with_count=False)} "
            f"{', '.join(str(s.index) for s in others)} never reached the collective that "
            f"{plural(len(waiting), 'instance', with_count=False)} {', '.join(str(s.index) for s in waiting)} "
            f"{'waits' if len(waiting) == 1 else 'wait'} in"
        )
    lines.append(
        "  hint: an instance waiting in a collective is usually waiting for the one that did not get "
        "there; raise --hang-timeout if a step legitimately takes longer"
    )
    return "\n".join(lines)


def mpi_end_report(mpiexec: str, returncode: int | None, lines: list[str], hosts: tuple[str, ...]) -> str:
    """mpiexec ended before every instance reported its end. When ssh could not reach hosts of the job
    (a host lost, and no --min-instances to leave it out), one line naming each and ssh's reason, as
    the pre-flight checks say it; otherwise mpiexec's last lines."""
    from poprun_py.preflight import ssh_problem, unreachable_hosts

    head = f"poprun_py: {mpiexec} ended with status {returncode} before every instance reported its end"
    unreachable = unreachable_hosts(lines, hosts)
    if unreachable:
        return head + ": " + "; ".join(ssh_problem(host, line.strip()) for host, line in unreachable.items())
    tail = "\n".join("    " + line for line in lines[-STDERR_LINES:])
    return head + (f"; its last messages:\n{tail}" if tail else "")
