"""The per-instance agent: what each MPI rank runs in launcher mode.

It turns its rank into an instance (environment, CPU placement, log files), starts the user's
program as a child in its own session, relays the child's output and progress to the launcher as
wire records, forwards signals, stops the whole child tree on request, and reports how the child
ended (exit code or signal, traceback, last stderr lines). It never initialises MPI itself, so
the child can.

Usage (built by the launcher): ``python -m poprun_py.agent SPEC_JSON -- program [args...]``
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

from poprun_py import env as envc
from poprun_py import wire
from poprun_py.agent_spec import AgentSpec, attempt_dir
from poprun_py.errors import plural
from poprun_py.fence import Fence
from poprun_py.lines import LINE, LineSplitter
from poprun_py.oom import oom_kill_count, was_oom_kill
from poprun_py.cpu_binding import numa_nodes, spread_cpus, thread_env
from poprun_py.processes import (
    become_subreaper,
    child_preexec,
    descendants,
    kill_all_descendants,
    leave,
    reap,
    set_parent_death_signal,
    signal_tree,
    start_sweeper,
    sweep_also,
)
from poprun_py.progress import MPI_READY
from poprun_py.python_program import wrap_python
from poprun_py.shm import SEGMENTS_LIST, SegmentTracker
from poprun_py.topology import InstanceInfo

STALE_PARTIAL_S = 0.5  # show a partial line (a bar without newline) after this long
PROGRESS_EVERY_S = 0.25  # coalesce progress reports to at most this rate
TAIL_LINES = 40
MPI_READY_LINE = MPI_READY.encode()
_HOST = os.uname().nodename  # socket.gethostname()'s answer, without importing socket
LINGER_S = 30.0  # after an abnormal end, wait at most this long for the launcher's release


class _State:
    """What the signal handlers tell the supervising loop."""

    def __init__(self) -> None:
        self.stop_requests = 0
        self.stop_signal = signal.SIGTERM
        self.forward: list[int] = []
        self.stopped = threading.Event()


class Agent:
    def __init__(self, spec: AgentSpec, info: InstanceInfo, program: list[str]) -> None:
        self.spec = spec
        self.info = info
        self.program = program
        self._out_lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._state = _State()
        self._progress = {"what": "", "n": 0, "dirty": False, "sent": 0.0}
        self._progress_lock = threading.Lock()
        run = "".join(c if c.isalnum() or c in "-." else "_" for c in spec.run_id)[:64]  # named after the run
        self._tmpdir = _private_dir(envc.temp_root(os.environ), f"poprun_{run}_i{info.index}_")
        self._segments_file = os.path.join(self._tmpdir, SEGMENTS_LIST)  # the program lists its own there
        self._logs: dict[str, object] = {}
        self._token = f"{spec.run_id}/{spec.restart_count}/{info.index}/{os.getpid()}"
        self._sweeper: tuple[int, int] | None = None
        self._shm = SegmentTracker(on_new=self._sweep_also, listed=self._segments_file)
        self._fence = Fence(spec.hang_timeout, spec.grace_period, LINGER_S, self._fenced)

    # -- output to the launcher ---------------------------------------------------------------
    def send(self, kind: str, **fields) -> None:
        data = wire.encode(kind, i=self.info.index, **fields)
        with self._out_lock:
            while data:  # a record is one write unless the pipe takes it in parts
                data = data[os.write(1, data) :]

    # -- child setup ---------------------------------------------------------------------------
    def _child_env(self, progress_fd: int, error_file: str, cpus: list[int]) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            envc.instance_env(
                self.info,
                run_id=self.spec.run_id,
                restart_count=self.spec.restart_count,
                executable_cache_path=self.spec.executable_cache_path,
            )
        )
        env.update(thread_env(len(cpus), env))
        env[envc.PROGRESS_FD] = str(progress_fd)
        env[envc.ERROR_FILE] = error_file
        env[envc.UNDER_AGENT] = "1"
        env[envc.JOB_TOKEN] = self._token
        env[envc.SEGMENTS_FILE] = self._segments_file
        # `import popdist`: poprun_py's folder on the path, where POPRUN_POPDIST says (env.with_popdist)
        env["PYTHONPATH"] = envc.python_path_with_popdist(env.get("PYTHONPATH"), envc.popdist_choice(env))
        return env

    def _place(self) -> list[int]:
        allowed = os.sched_getaffinity(0)
        if self.spec.process_placement == "disabled":
            return sorted(allowed)
        local_count = self.info.num_instances // self.spec.num_hosts
        cpus = spread_cpus(numa_nodes(), allowed, self.info.local_index, local_count)
        os.sched_setaffinity(0, cpus)  # inherited by the child
        return cpus

    def _open_logs(self) -> None:
        if not self.spec.log_dir:
            return
        folder = attempt_dir(self.spec.log_dir, self.spec.restart_count, self.info.index)
        os.makedirs(folder, exist_ok=True)
        for stream in ("stdout", "stderr"):
            self._logs[stream] = open(os.path.join(folder, f"{stream}.log"), "ab", buffering=0)

    # -- relaying ------------------------------------------------------------------------------
    def _relay(self, fd: int, stream: str) -> None:
        splitter = LineSplitter()
        log = self._logs.get("stdout" if stream == "out" else "stderr")
        while True:
            ready, _, _ = select.select([fd], [], [], STALE_PARTIAL_S)
            if not ready:
                self._emit(stream, splitter.stale())
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            if log is not None:
                log.write(chunk)
            self._emit(stream, splitter.feed(chunk))
        self._emit(stream, splitter.close())
        os.close(fd)

    def _emit(self, stream: str, pieces: list[tuple[str, str]]) -> None:
        if pieces:
            self._fence.touch()
        for kind, text in pieces:
            if stream == "err" and kind == LINE:
                self._tail.append(text)
            self.send(wire.OUT, s=stream, k=kind, x=text)

    def _read_progress(self, fd: int) -> None:
        buf = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            if lines:
                self._fence.touch()
                with self._progress_lock:
                    self._progress["what"] = lines[-1].decode(errors="replace")[:200]
                    self._progress["n"] += len(lines)
                    self._progress["dirty"] = True
                # the first report comes soon after MPI_Init: a scan finds its segment
                self._shm.poke(mpi_ready=any(line == MPI_READY_LINE for line in lines))
                self._flush_progress()
        os.close(fd)

    def _flush_progress(self, force: bool = False) -> None:
        with self._progress_lock:
            p = self._progress
            now = time.monotonic()
            if not p["dirty"] or (not force and now - p["sent"] < PROGRESS_EVERY_S):
                return
            p["dirty"], p["sent"] = False, now
            what, n = p["what"], p["n"]
        self.send(wire.PROGRESS, what=what, n=n)

    # -- signals -------------------------------------------------------------------------------
    def _install_signals(self) -> None:
        def stop(signum, _frame):
            self._state.stop_requests += 1
            self._state.stop_signal = signum
            self._state.stopped.set()

        def forward(signum, _frame):
            self._state.forward.append(signum)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop)
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, forward)

    # -- main ----------------------------------------------------------------------------------
    def run(self) -> int:
        self._install_signals()
        set_parent_death_signal(signal.SIGTERM)
        become_subreaper()
        # If the MPI launcher kills this agent before it has stopped its program's tree (MPICH
        # does, once another rank ended abnormally), the sweeper still finds every descendant by
        # the token in its environment, including those in sessions of their own.
        self._sweeper = start_sweeper(envc.JOB_TOKEN, self._token, workdir=self._tmpdir)
        self._fence.start()
        cpus = self._place()
        self._open_logs()
        progress_r, progress_w = os.pipe()
        error_file = os.path.join(self._tmpdir, "error.json")
        oom_before = oom_kill_count()
        started = time.monotonic()
        try:
            child = subprocess.Popen(
                wrap_python(self.program),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._child_env(progress_w, error_file, cpus),
                pass_fds=_mpi_fds() + [progress_w],
                start_new_session=True,
                preexec_fn=child_preexec(signal.SIGKILL),
            )
        except OSError as err:
            os.close(progress_w)
            self.send(wire.START, pid=None, host=_HOST, cpus=cpus)
            msg = f"cannot start {self.program[0]!r}: {err.strerror}"
            self.send(wire.EXIT, code=127, signal=None, duration=0.0, stopped=False,
                      error={"type": "OSError", "message": msg, "traceback": ""}, tail=[msg])
            return 127
        os.close(progress_w)
        self._shm = SegmentTracker(on_new=self._sweep_also, listed=self._segments_file)
        self.send(wire.START, pid=child.pid, host=_HOST, cpus=cpus)
        readers = [
            threading.Thread(target=self._relay, args=(child.stdout.fileno(), "out"), daemon=True),
            threading.Thread(target=self._relay, args=(child.stderr.fileno(), "err"), daemon=True),
            threading.Thread(target=self._read_progress, args=(progress_r,), daemon=True),
        ]
        for t in readers:
            t.start()
        stopped = self._supervise(child)
        ended_at = time.time()
        duration = time.monotonic() - started
        self._shm.scan([p.pid for p in self._tree()])  # what the program left running maps too
        self.kill_tree()  # grandchildren left behind would hold the pipes open
        for t in readers:
            t.join(timeout=2.0)
        self._flush_progress(force=True)
        code, sig = (None, -child.returncode) if child.returncode < 0 else (child.returncode, None)
        oom = was_oom_kill(oom_before, oom_kill_count()) if sig == signal.SIGKILL else None
        self.send(wire.EXIT, code=code, signal=sig, duration=round(duration, 3), stopped=stopped,
                  ended_at=ended_at, error=_read_error_file(error_file), tail=list(self._tail), oom=oom)
        if stopped or sig or code:
            self._fence.ended()
            self._linger()
            # Every instance has ended: the MPI segments its processes mapped are garbage now
            # (MPICH unlinks them only in MPI_Finalize, which an abnormal end never reaches).
            self._shm.remove()
        return 128 + sig if sig else code

    def _linger(self) -> None:
        """After an abnormal end, stay until the launcher's release (its second SIGTERM).

        MPICH's mpiexec SIGKILLs every other rank as soon as one rank leaves after an abnormal end
        of its MPI program, which would cut the other agents short while their programs are still
        in their grace period. The launcher sends the release once every instance has reported.
        """
        deadline = time.monotonic() + LINGER_S
        while self._state.stop_requests < 2 and time.monotonic() < deadline:
            self._state.stopped.wait(max(0.0, deadline - time.monotonic()))
            self._state.stopped.clear()

    def _sweep_also(self, path: str) -> None:
        if self._sweeper is not None:
            sweep_also(self._sweeper[1], path)

    def _scan_shm(self, procs: list | None = None) -> None:
        """Record the MPI shared-memory segments the program's tree maps (poprun_py/shm.py)."""
        self._shm.scan([p.pid for p in (self._tree() if procs is None else procs)])

    def kill_tree(self) -> None:
        """SIGKILL every descendant but the sweeper."""
        kill_all_descendants(spare=(self._sweeper[0],) if self._sweeper else ())

    def finish(self) -> None:
        """Stop everything left, remove the working folder, then dismiss the sweeper (as a subreaper,
        this agent's tree holds every descendant, so the kill above found them all) and reap it. In
        that order: MPICH may SIGKILL an agent at any moment once another rank ended abnormally, and
        until the sweeper is dismissed it removes the folder itself if this agent dies."""
        self._fence.cancel()
        self.kill_tree()
        _cleanup(self._tmpdir)
        if self._sweeper is not None:
            pid, fd = self._sweeper
            self._sweeper = None
            os.write(fd, b"x")
            os.close(fd)
            reap(pid, timeout=5.0)

    def _supervise(self, child: subprocess.Popen) -> bool:
        """Wait for the child, acting on stop and forward requests. True if we stopped it."""
        state = self._state
        handled = 0
        kill_at = None
        ended = _exit_waiter(child)
        while True:
            if ended(0.1):
                child.wait()
                return handled > 0
            if self._shm.due(time.monotonic()):
                self._scan_shm()

            while state.forward:
                signal_tree(child.pid, [], state.forward.pop(0))
            if state.stop_requests > handled:
                handled = state.stop_requests
                if handled == 1:
                    self._fence.stopping()
                    first = signal.SIGINT if state.stop_signal == signal.SIGINT else signal.SIGTERM
                    tree = self._tree()
                    self._scan_shm(tree)  # the last moment every process of the tree is sure to be alive
                    signal_tree(child.pid, tree, first)
                    kill_at = time.monotonic() + self.spec.grace_period
                else:
                    kill_at = time.monotonic()  # a second request: no more grace
            if kill_at is not None and time.monotonic() >= kill_at:
                signal_tree(child.pid, self._tree(), signal.SIGKILL)
                kill_at = time.monotonic() + 1.0
            self._flush_progress()

    def _fenced(self, why: str) -> None:
        """Out of the launcher's reach (``poprun_py.fence``): stop everything of this instance here."""
        log = self._logs.get("stderr")
        if log is not None:
            log.write(f"poprun_py: instance {self.info.index} on host {_HOST} is out of the "
                      f"launcher's reach: {why}; stopping it and its MPI proxy\n".encode())
        import psutil

        tree = self._tree()
        self._scan_shm(tree)
        self.kill_tree()
        psutil.wait_procs(tree, timeout=2.0)
        self._shm.remove()
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    def _tree(self) -> list:
        return descendants(spare=(self._sweeper[0],) if self._sweeper else ())


def _exit_waiter(child: subprocess.Popen):
    """``ended(timeout)``: True once ``child`` has ended, waiting at most ``timeout`` seconds.

    A pidfd (Linux 5.3) wakes the agent the moment the child ends; ``Popen.wait`` with a timeout
    polls with sleeps that grow to 50 ms, and every instance's end would wait for one of them.
    """
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        def ended(timeout: float) -> bool:
            try:
                child.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False

        return ended

    def ended(timeout: float) -> bool:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if ready:
            os.close(pidfd)
        return bool(ready)

    return ended


def _mpi_fds() -> list[int]:
    """File descriptors the MPI launcher handed this rank (PMI), which the child must inherit."""
    fds = []
    for name in ("PMI_FD", "PMI_PORT_FD"):
        raw = os.environ.get(name, "")
        if raw.isdigit():
            fds.append(int(raw))
    return fds


def _private_dir(root: str, prefix: str) -> str:
    """A new folder under ``root`` that only this user can enter, named ``prefix`` + pid + n.

    ``tempfile.mkdtemp`` does the same with random names, but importing it (and ``random``,
    ``hashlib`` with it) is a tenth of an agent's start-up; ``os.mkdir`` refuses a name that
    exists, also as a link, so a name known in advance is as safe.
    """
    for n in range(1000):
        path = os.path.join(root, f"{prefix}{os.getpid()}_{n}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free folder name {prefix}{os.getpid()}_N in {root}; remove stale poprun_* folders there")


def _read_error_file(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m poprun_py.agent SPEC_JSON -- program [args...] (started by poprun_py)",
              file=sys.stderr)
        return 2
    spec = AgentSpec.from_json(argv[0])
    rank = envc.detect_rank(os.environ)
    rank_index = rank.rank if rank else 0
    size = rank.size if rank else 1
    if size != len(spec.instances):
        print(f"poprun_py agent: the MPI launcher started {plural(size, 'rank')} but the job has "
              f"{plural(len(spec.instances), 'instance')}; start jobs through poprun_py", file=sys.stderr)
        return 2
    info = spec.instances[rank_index]
    agent = Agent(spec, info, argv[2:])
    try:
        return agent.run()
    finally:
        agent.finish()


def _cleanup(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    leave(main())
