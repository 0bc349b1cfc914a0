"""Starting a job through the MPI launcher, watching it, and stopping it cleanly.

One ``Job`` runs up to ``1 + max_restarts`` attempts. An attempt starts ``mpiexec`` (in its own
session, dying with the launcher), reads the agents' records from its output, and ends when
mpiexec exits. The first instance that fails, a hang, or a signal to the launcher starts the
teardown: SIGTERM to mpiexec (which forwards it to every agent, and they to their programs),
a second SIGTERM once the grace period is over (agents then SIGKILL their trees), and as a last
resort SIGKILL to mpiexec's session and to the local agents.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field

from poprun_py import elastic, wire
from poprun_py.agent_spec import AgentSpec, attempt_dir
from poprun_py.config import LaunchConfig
from poprun_py.errors import EXIT_HANG, EXIT_INTERRUPTED, EXIT_TERMINATED, ConfigError, plural, signal_name
from poprun_py.mpi_command import agent_command, build_mpiexec_argv
from poprun_py.output import Console, TagFields
from poprun_py.processes import child_preexec
from poprun_py.report import InstanceState, failure_report, hang_report, mpi_end_report
from poprun_py.topology import InstanceInfo, assign_instances

logger = logging.getLogger(__name__)

FAILURE_GRACE_S = 2.0  # survivors of a failed job get this long after SIGTERM
BACKSTOP_S = 5.0  # after the last SIGTERM, SIGKILL whatever is left
STARTUP_TIMEOUT_S = 120.0  # every agent must report its start within this


@dataclass
class AttemptResult:
    restart_count: int
    exit_code: int
    reason: str  # ok | failed | hang | interrupted | mpi
    root_cause: int | None
    states: list[InstanceState]
    mpi_returncode: int | None
    started: float
    ended: float
    command: list[str]
    infos: list[InstanceInfo]  # the topology it ran with (elastic restarts change it)
    lost_hosts: dict[str, str] = field(default_factory=dict)  # found lost after it ended, with why


class Job:
    def __init__(self, config: LaunchConfig, infos: list[InstanceInfo], console: Console, *, mpiexec: str,
                 flavor: str, run_id: str, python: str) -> None:
        self.config = config
        self.console = console
        self.mpiexec = mpiexec
        self.flavor = flavor
        self.run_id = run_id
        self.python = python
        self.infos = list(infos)  # the placement, computed once by the caller (assign_instances)
        self.attempts: list[AttemptResult] = []
        self._events: queue.Queue = queue.Queue()
        self._stop_signals: list[int] = []
        self._proc: subprocess.Popen | None = None

    # -- public --------------------------------------------------------------------------------
    def argv(self, restart_count: int) -> list[str]:
        spec = AgentSpec.for_job(self.config, self.run_id, tuple(self.infos), restart_count)
        return build_mpiexec_argv(
            self.config, mpiexec=self.mpiexec, flavor=self.flavor,
            rank_command=agent_command(spec.to_json(), self.config.program, self.python),
            environ=os.environ, is_root=os.geteuid() == 0,
        )

    def run(self) -> int:
        previous = self._install_signals()
        try:
            for restart in range(self.config.max_restarts + 1):
                result = self._run_attempt(restart)
                self.attempts.append(result)
                self._write_run_record()
                if result.reason in ("ok", "interrupted") or restart == self.config.max_restarts:
                    return result.exit_code
                if not self._keep_answering_hosts(result):
                    return result.exit_code
                self.console.message(
                    f"poprun_py: restarting the job ({restart + 1} of {self.config.max_restarts}); "
                    f"the program sees POPRUN_RESTART_COUNT={restart + 1}"
                )
            return self.attempts[-1].exit_code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.console.close()

    def _keep_answering_hosts(self, result: AttemptResult) -> bool:
        """``--min-instances``: go on without the hosts that no longer answer (``poprun_py.elastic``);
        False when the replicas cannot be placed on those that do."""
        if self.config.min_instances is None or len(self.config.hosts) < 2:
            return True
        lost = elastic.probe_hosts(self.config, mpiexec=self.mpiexec, flavor=self.flavor, python=self.python)
        if not lost:
            return True
        result.lost_hosts = lost
        try:
            config = elastic.shrink(self.config, [h for h in self.config.hosts if h not in lost])
        except ConfigError as err:
            self.console.message(f"poprun_py: {elastic.describe_loss(lost)}; {err}; stopping")
            self._write_run_record()
            return False
        self.config, self.infos = config, assign_instances(config)
        self.console.message(
            f"poprun_py: {elastic.describe_loss(lost)}; going on with {plural(len(config.hosts), 'host')} "
            f"({', '.join(config.hosts)}): {plural(config.num_instances, 'instance')} x "
            f"{plural(config.replicas_per_instance, 'local replica')}, the same {config.num_replicas} replicas")
        self._write_run_record()
        return True

    # -- signals -------------------------------------------------------------------------------
    def _install_signals(self) -> dict:
        def stop(signum, _frame):
            self._stop_signals.append(signum)
            self._events.put(("signal", signum))

        def forward(signum, _frame):
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signum)

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, stop)
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            previous[sig] = signal.signal(sig, forward)
        return previous

    # -- one attempt ---------------------------------------------------------------------------
    def _run_attempt(self, restart: int) -> AttemptResult:
        argv = self.argv(restart)
        logger.info("Running command: %s", json.dumps(argv))
        states = [InstanceState(i.index) for i in self.infos]
        started = time.time()
        self._proc = proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=child_preexec(signal.SIGTERM),
        )
        logger.info("Waiting for %s (PID %d)", os.path.basename(self.mpiexec), proc.pid)
        self._events = queue.Queue()
        readers = [threading.Thread(target=self._read, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=self._read, args=(proc.stderr, "err"), daemon=True),
                   threading.Thread(target=lambda: self._events.put(("exited", proc.wait())), daemon=True)]
        for t in readers:
            t.start()
        watch = _Teardown(self, proc, states)
        open_streams = 2
        exited = False
        t_start = time.monotonic()
        while open_streams or not exited:
            try:
                kind, payload = self._events.get(timeout=0.1)
            except queue.Empty:
                kind, payload = None, None
            if kind in ("out", "err"):
                if payload is None:
                    open_streams -= 1
                else:
                    self._handle_line(kind, payload, states, watch)
            elif kind == "signal":
                watch.on_signal(payload)
            elif kind == "exited":
                exited = True
            now = time.monotonic()
            if watch.reason is None:
                self._check_hang(states, now, watch)
                if now - t_start > STARTUP_TIMEOUT_S and any(s.host is None for s in states):
                    missing = [s.index for s in states if s.host is None]
                    self.console.message(
                        f"poprun_py: {plural(len(missing), 'instance', with_count=False)} "
                        f"{', '.join(map(str, missing))} did not start within {STARTUP_TIMEOUT_S:g} s; "
                        "check that python and poprun_py exist at the same path on every host")
                    watch.begin("failed", FAILURE_GRACE_S)
            watch.tick(now)
        for t in readers:
            t.join(timeout=1.0)
        code, reason = watch.outcome(proc.returncode)
        if watch.root_cause is not None:
            cause = states[watch.root_cause]
            self.console.message(failure_report(cause, len(states), self._log_hint(cause.index),
                                                shown=self.console.shows(cause.index)))
        return AttemptResult(restart, code, reason, watch.root_cause, states, proc.returncode,
                             started, time.time(), argv, list(self.infos))

    def _read(self, pipe, stream: str) -> None:
        for line in iter(pipe.readline, b""):
            self._events.put((stream, line))
        self._events.put((stream, None))

    def _handle_line(self, stream: str, line: bytes, states: list[InstanceState], watch: "_Teardown") -> None:
        record = wire.decode(line)
        if record is None or not isinstance(record.get("i"), int) or not 0 <= record["i"] < len(states):
            text = line.decode(errors="replace").rstrip()
            watch.mpi_lines.append(text)
            if watch.reason is None:  # once we stop the job, mpiexec's cleanup chatter is noise
                self.console.raw(stream, text)
            else:
                logger.debug("mpiexec: %s", text)
            return
        state = states[record["i"]]
        state.last_activity = time.monotonic()
        kind = record["t"]
        if kind == wire.OUT:
            show = self.console.line if record.get("k") == "line" else self.console.frame
            show(state.index, record.get("s", "out"), record.get("x", ""))
        elif kind == wire.PROGRESS:
            state.last_what, state.reports = record.get("what", ""), record.get("n", 0)
        elif kind == wire.START:
            state.host, state.pid, state.cpus = record.get("host"), record.get("pid"), record.get("cpus")
            info = self.infos[state.index]
            self.console.fields[state.index] = TagFields(
                state.index, state.host or "?", state.pid or "?", info.local_index,
                f"{info.replicas.start}-{info.replicas.stop - 1}")
        elif kind == wire.EXIT:
            state.ended = True
            state.exit_code, state.signal = record.get("code"), record.get("signal")
            state.duration, state.stopped = record.get("duration"), bool(record.get("stopped"))
            state.ended_at = record.get("ended_at")
            state.oom_killed = record.get("oom")
            state.error, state.tail = record.get("error"), record.get("tail") or []
            logger.info("instance %d ended: code %s signal %s", state.index, state.exit_code, state.signal)
            if state.failed:
                watch.begin("failed", FAILURE_GRACE_S)

    def _check_hang(self, states: list[InstanceState], now: float, watch: "_Teardown") -> None:
        timeout = self.config.hang_timeout
        if timeout is None:
            return
        if any(s.host is not None and not s.ended and now - s.last_activity > timeout for s in states):
            self.console.message(hang_report(states, now, timeout))
            watch.begin("hang", FAILURE_GRACE_S)

    def _log_hint(self, index: int) -> str | None:
        if not self.config.log_dir:
            return None
        return attempt_dir(self.config.log_dir, len(self.attempts), index)

    # -- run record ----------------------------------------------------------------------------
    def _write_run_record(self) -> None:
        if not self.config.log_dir:
            return
        record = {
            "run_id": self.run_id,
            "config": asdict(self.config),
            "mpiexec": self.mpiexec,
            "mpi_flavor": self.flavor,
            "topology": [i._asdict() for i in self.infos],
            "attempts": [
                {
                    "restart_count": a.restart_count, "command": a.command,
                    "hosts": list(dict.fromkeys(i.host for i in a.infos)),
                    "num_instances": len(a.infos), "local_replicas": a.infos[0].num_local_replicas,
                    "lost_hosts": a.lost_hosts,
                    "started": a.started, "ended": a.ended, "duration_s": round(a.ended - a.started, 3),
                    "exit_code": a.exit_code, "reason": a.reason, "root_cause_instance": a.root_cause,
                    "mpi_returncode": a.mpi_returncode, "instances": [s.to_json() for s in a.states],
                }
                for a in self.attempts
            ],
            "exit_code": self.attempts[-1].exit_code if self.attempts else None,
        }
        os.makedirs(self.config.log_dir, exist_ok=True)
        path = os.path.join(self.config.log_dir, "run.json")
        with open(path + ".tmp", "w") as f:
            json.dump(record, f, indent=2)
        os.replace(path + ".tmp", path)


class _Teardown:
    """The stop sequence of one attempt: why it stopped and what has been sent so far."""

    def __init__(self, job: Job, proc: subprocess.Popen, states: list[InstanceState]) -> None:
        self.job, self.proc, self.states = job, proc, states
        self.reason: str | None = None
        self.root_cause: int | None = None
        self.signal: int | None = None
        self.second_at: float | None = None
        self.kill_at: float | None = None
        self.released = False
        self.mpi_lines: list[str] = []

    def begin(self, reason: str, grace: float, first: int = signal.SIGTERM) -> None:
        """Stop the job: ``first`` through mpiexec to every agent (SIGINT for a Ctrl-C, which Hydra
        passes on as it is, so that programs see Ctrl-C; SIGTERM otherwise), SIGTERM after ``grace``."""
        if self.reason is not None:
            return
        self.reason = reason
        self._send(first)
        now = time.monotonic()
        self.second_at = now + grace
        self.kill_at = now + grace + BACKSTOP_S

    def on_signal(self, signum: int) -> None:
        if self.reason is None:
            self.job.console.message(
                f"poprun_py: received {signal_name(signum)}; stopping all instances "
                f"(grace period {self.job.config.grace_period:g} s, repeat to force)")
            self.signal = signum
            self.begin("interrupted", self.job.config.grace_period,
                       signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
        elif self.second_at is not None:
            self.second_at = time.monotonic()  # a repeated Ctrl-C: no more grace

    def tick(self, now: float) -> None:
        started = [s for s in self.states if s.host is not None]
        if self.reason is not None and not self.released and started and all(s.ended for s in started):
            # Every instance reported how it ended: release the agents, which wait for a second
            # SIGTERM so that MPICH cannot cut the slower ones short (see agent._linger).
            self.released = True
            self.second_at = None
            self._send(signal.SIGTERM)
            self.kill_at = now + BACKSTOP_S
        if self.second_at is not None and now >= self.second_at:
            self.second_at = None
            self._send(signal.SIGTERM)
            self.kill_at = now + BACKSTOP_S
        if self.kill_at is not None and now >= self.kill_at and self.proc.poll() is None:
            self.kill_at = None
            logger.warning("mpiexec did not stop; killing it and the local instances")
            self._kill_everything()

    def _send(self, signum: int) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass

    def _kill_everything(self) -> None:
        import psutil  # the last resort only: a job that ends in order never needs it

        procs = []
        for pid in [self.proc.pid] + [s.pid for s in self.states if s.pid]:
            try:
                p = psutil.Process(pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass

    def outcome(self, returncode: int | None) -> tuple[int, str]:
        if self.reason == "interrupted":
            return (EXIT_INTERRUPTED if self.signal == signal.SIGINT else EXIT_TERMINATED), "interrupted"
        if self.reason == "hang":
            return EXIT_HANG, "hang"
        failed = [s for s in self.states if s.failed]
        if self.reason == "failed" and failed:
            # The first to die is the cause: peers may fail soon after, from MPI noticing the death.
            first = min(failed, key=lambda s: (s.ended_at if s.ended_at is not None else float("inf"), s.index))
            self.root_cause = first.index
            return first.shell_code, "failed"
        if self.reason == "failed":
            return 1, "failed"
        if returncode not in (0, None) or any(not s.ended for s in self.states):
            self.job.console.message(mpi_end_report(os.path.basename(self.job.mpiexec), returncode, self.mpi_lines,
                                                    self.job.config.hosts))
            return (128 - returncode if returncode and returncode < 0 else returncode or 1), "mpi"
        return 0, "ok"

