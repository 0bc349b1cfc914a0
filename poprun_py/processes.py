"""Process-tree hygiene: parent-death signals, subreaping and killing whole trees."""

from __future__ import annotations

import os
import signal
import sys
import time

from poprun_py.shm import SEGMENTS_LIST, listed_segments

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (5 ms of an agent's start)
if TYPE_CHECKING:
    import psutil

# psutil is imported where a tree is walked, not at start: it is a fifth of an agent's start-up,
# and an instance whose program left nothing behind never walks one (``descendants``).

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_parent_death_signal(signum: int) -> None:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux)."""
    parent = os.getppid()
    _prctl(_PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signum)


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process instead of init (Linux), so that
    it can still find and stop them."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def child_preexec(signum: int = signal.SIGKILL):
    """A ``preexec_fn`` that makes the child die with its parent."""

    def _preexec() -> None:
        _prctl(_PR_SET_PDEATHSIG, signum)

    return _preexec


def own_children() -> list[int] | None:
    """This process's children from the kernel's per-thread lists (Linux, one small read per
    thread), or None where the kernel has no such list. Children re-parented to a subreaper are
    listed too, under whichever of its threads the kernel chose."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    pids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            if tid == str(os.getpid()):
                return None  # the kernel has no children lists (CONFIG_PROC_CHILDREN off)
        except OSError:
            return None
    return pids


def descendants(pid: int | None = None, spare: tuple[int, ...] = ()) -> list[psutil.Process]:
    """Every process below ``pid`` (default: this process) but those in ``spare``, which must have
    no children of their own (the agent's sweeper).

    For this process, when its only children are ``spare`` (the usual end of a program that left
    nothing behind) the answer comes from the kernel's children lists without walking /proc.
    """
    if pid is None:
        children = own_children()
        if children is not None and set(children) <= set(spare):
            return []
    import psutil

    try:
        found = psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in found if p.pid not in spare]


def signal_tree(root_pid: int | None, procs: list[psutil.Process], signum: int) -> None:
    """Send ``signum`` to a child's process group and to every process of ``procs`` outside it
    (descendants that started sessions of their own), each process once."""
    if root_pid is not None:
        try:
            os.killpg(root_pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    if not procs:
        return
    import psutil  # already imported: the processes came from it

    for proc in procs:
        try:
            if root_pid is None or os.getpgid(proc.pid) != root_pid:
                proc.send_signal(signum)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass


def kill_all_descendants(timeout: float = 2.0, spare: tuple[int, ...] = ()) -> None:
    """SIGKILL every process below this one (but ``spare``) and reap them."""
    procs = descendants(spare=spare)
    if procs:
        import psutil

        signal_tree(None, procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=timeout)


def leave(code: int) -> None:
    """Exit with ``code`` once stdout and stderr are flushed, without the interpreter's teardown
    of every module (10-40 ms of CPU on a small VM). For the agent and the launcher, at every
    job's end: their records go out with ``os.write`` or flushed streams, their log files are
    unbuffered, and neither runs a user's code or registers exit handlers."""
    logging = sys.modules.get("logging")  # the launcher's handlers; the agent never imports it
    if logging is not None:
        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def reap(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for this process's child ``pid`` to end and reap it.
    True when it ended (or was already reaped)."""
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def processes_with_env(name: str, value: str, exclude: tuple[int, ...] = ()) -> list[psutil.Process]:
    """This user's processes whose environment has ``name=value`` (inherited by all descendants,
    also those that started sessions of their own and were re-parented to init)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude:
            continue
        try:
            if proc.environ().get(name) == value:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def start_sweeper(name: str, value: str, workdir: str | None = None) -> tuple[int, int]:
    """Fork a watchdog that, once this process ends in any way (even SIGKILL), kills every
    process carrying ``name=value`` in its environment, then removes the files named to it.

    Returns (watchdog pid, fd). Write a line with a file's absolute path (``sweep_also``) to have
    it removed after the sweep (the MPI shared-memory files of the tree, poprun_py/shm.py).
    ``workdir``: this process's working folder, removed after the sweep too, with the MPI segments
    listed in its ``SEGMENTS_LIST`` file (``poprun_py.shm.report_segments``: the program's own list).
    Closing the fd triggers the sweep; writing ``b"x"`` first says the tree is already clean and
    the watchdog leaves without scanning. The watchdog starts a session of its own, so whoever
    kills this process's group or session misses it. Call before starting threads.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watchdog
        try:
            os.setsid()
            os.close(write_fd)
            data = b""
            while chunk := os.read(read_fd, 65536):
                data += chunk
            lines = data.split(b"\n")
            if b"x" in lines:
                os._exit(0)
            import psutil

            procs = processes_with_env(name, value, exclude=(os.getpid(),))
            for proc in procs:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=2.0)
            paths = [line for line in lines if line.startswith(b"/")]
            if workdir is not None:
                paths += [os.fsencode(p) for p in listed_segments(os.path.join(workdir, SEGMENTS_LIST))]
            for path in paths:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            if workdir is not None:
                import shutil

                shutil.rmtree(workdir, ignore_errors=True)
        finally:
            os._exit(0)
    os.close(read_fd)
    return pid, write_fd


def sweep_also(fd: int, path: str) -> None:
    """Tell the sweeper behind ``fd`` to remove ``path`` after it swept (see ``start_sweeper``)."""
    os.write(fd, os.fsencode(path) + b"\n")
