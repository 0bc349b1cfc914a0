"""MPI shared-memory segments that a job leaves in ``/dev/shm`` when it does not end normally.

MPICH (4.2 and later, the ``mpich`` wheel among them) creates one POSIX shared-memory file per
job and host at ``MPI_Init``, ``/dev/shm/mpich_shm_<world id>_<node>`` (2 MiB for two ranks), and
keeps it under that name for the whole job: any rank may open it by name at any time (MPI
sessions), so MPICH unlinks it only in ``MPI_Finalize``, and no MPICH setting unlinks it earlier.
A job that crashes, is killed, hangs or is interrupted never finalises, and the file stays until
the machine reboots. Its other shared-memory files are unlinked as soon as every rank has mapped
them (``/proc/<pid>/maps`` shows them as ``(deleted)``).

The names cannot be predicted (the world id is a hash made inside MPICH), and deleting by pattern
would hit other jobs' files. So the job's own processes are asked: a segment is the job's when one
of its processes maps it. ``mapped_segments`` reads that from ``/proc/<pid>/maps`` (a read of a
few kB, done by the agent, never in the training process); ``SegmentTracker`` schedules those reads
(shortly after the program starts, backing off to once a minute; at once when the program reports
that MPI_Init has returned (``progress.MPI_READY``, which poprun_py's communicator sends); after a
progress report at most every ``PROGRESS_SCAN_EVERY_S`` until a segment is found; and before the
agent stops the program:
each scan reads about 400 lines, 1 ms, plus 2 ms to list the tree, in the agent), and the agent
removes what it recorded once the job has ended abnormally. A Python program run by the bootstrap
also removes the segments its own process maps when it fails (``remove_own_segments``), before
``MPI_Abort`` in in-MPI mode. And right after MPI_Init, before it reports ``MPI_READY``, poprun_py's
communicator lists them in the file the agent names (``report_segments``): an agent killed by
the MPI launcher before its scan came (a host lost a moment after MPI_Init, and MPICH kills every
rank) has its sweeper (``poprun_py.processes.start_sweeper``) remove them.

In in-MPI mode there is no agent: each rank forks a small watcher (``start_watcher``) in a session
of its own, which the MPI launcher's kills miss. It scans the rank on the same schedule, is told the
segments right after MPI_Init by the runtime (``report_segments``, called when poprun_py's
communicator is created), and removes them when the rank ends without a normal interpreter exit
(a crash, SIGKILL, MPI_Abort from another rank).
"""

from __future__ import annotations

import atexit
import os
import select
import time
from collections.abc import Callable, Iterable


SHM_DIR = "/dev/shm"
# The names MPI libraries give the files they keep for a job's lifetime: MPICH 4.2+ (``mpich_shm_``,
# ``mpich_vci_``), Open MPI's shared-memory transport (``vader_segment.``, ``sm_segment.``).
MPI_PREFIXES = ("mpich_", "vader_segment.", "sm_segment.")
_MARK = b" " + SHM_DIR.encode() + b"/"
_DELETED = b" (deleted)"

# The scan schedule after the program starts (seconds), then every SCAN_EVERY_S.
SCAN_AT_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
SCAN_EVERY_S = 60.0
PROGRESS_SCAN_EVERY_S = 5.0
SEGMENTS_LIST = "mpi_segments"  # in the agent's working folder: the program's own list (report_segments)


def mapped_segments(pid: int) -> set[str]:
    """Paths of the MPI segments in ``/dev/shm`` that process ``pid`` maps and that still have a name.

    Empty when the process is gone, is a zombie, or its maps cannot be read.
    """
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except OSError:
        return set()
    if _MARK not in data:
        return set()
    found = set()
    for line in data.splitlines():
        at = line.find(_MARK)
        if at < 0 or line.endswith(_DELETED):
            continue
        name = line[at + len(_MARK):].decode(errors="replace")
        if "/" not in name and name.startswith(MPI_PREFIXES):
            found.add(os.path.join(SHM_DIR, name))
    return found


def remove_segments(paths: Iterable[str]) -> list[str]:
    """Unlink ``paths`` (already gone is fine); the paths that were removed."""
    removed = []
    for path in sorted(paths):
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            import logging  # only here: the agent starts without it

            logging.getLogger(__name__).warning(
                "cannot remove the MPI shared-memory file %s (%s); remove it by hand", path, err.strerror)
    return removed


def remove_own_segments() -> list[str]:
    """Unlink the MPI segments this process maps (its job is ending abnormally). Its own mapping
    stays valid, and so do those of the other ranks; only the name goes."""
    return remove_segments(mapped_segments(os.getpid()))


class SegmentTracker:
    """Records the MPI segments a process tree maps, on a schedule that costs the tree nothing
    measurable, so that they can be removed after the tree is gone.

    ``scan(pids)`` reads the maps now; ``due(now)`` says whether the schedule wants a scan;
    ``poke()`` (a progress report came) asks for one unless the last was recent. ``on_new`` is
    called with every newly found path (the agent hands them to its sweeper); ``listed`` names the
    file where the program lists its segments (``report_segments``): ``remove()`` removes those too.
    """

    def __init__(self, started: float | None = None, on_new: Callable[[str], None] | None = None,
                 listed: str | None = None) -> None:
        self.started = time.monotonic() if started is None else started
        self._listed = listed  # a file where the program lists its segments itself (report_segments)
        self.segments: set[str] = set()
        self.scans = 0
        self._last = float("-inf")
        self._poked = self._ready = False
        self._on_new = on_new

    def due(self, now: float) -> bool:
        if self._ready and not self.segments:
            return True  # MPI_Init has just returned: its segment is there now
        if self._poked and not self.segments and now - self._last >= PROGRESS_SCAN_EVERY_S:
            return True  # MPI_Init may have just happened; once a segment is known, the schedule is enough
        return now >= self._next_scheduled()

    def seconds_to_next(self, now: float) -> float:
        return max(0.0, self._next_scheduled() - now)

    def _next_scheduled(self) -> float:
        if self.scans < len(SCAN_AT_S):
            return self.started + SCAN_AT_S[self.scans]
        return self._last + SCAN_EVERY_S

    def poke(self, mpi_ready: bool = False) -> None:
        """A progress report came; ``mpi_ready``: it says MPI_Init has returned (scan at once)."""
        self._poked = True
        self._ready = self._ready or mpi_ready

    def scan(self, pids: Iterable[int], now: float | None = None) -> set[str]:
        """Read the maps of ``pids`` now; the segments found for the first time."""
        self._last = time.monotonic() if now is None else now
        self._poked = self._ready = False
        self.scans += 1
        new = set()
        for pid in pids:
            new |= mapped_segments(pid) - self.segments
        for path in sorted(new):
            self.segments.add(path)
            if self._on_new is not None:
                self._on_new(path)
        return new

    def remove(self) -> list[str]:
        """Unlink every recorded segment and every listed one (call once the tree has ended)."""
        return remove_segments(self.segments | (listed_segments(self._listed) if self._listed else set()))


_watcher_fd: int | None = None
_DONE = b"x"


def start_watcher(*, survive_exec: bool = False) -> int:
    """Fork a watcher of this process's MPI segments (in-MPI mode); its pid.

    The watcher scans this process on ``SegmentTracker``'s schedule and takes the paths that
    ``report_segments`` sends; when this process ends, it removes them, unless this process
    exited normally (``_watcher_done`` at interpreter exit), after ``MPI_Finalize`` did. With
    ``survive_exec`` the pipe stays open across ``exec`` (the process becomes a non-Python MPI
    program, which the schedule alone watches). Call before MPI is initialised and before threads.
    """
    global _watcher_fd
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # the MPI launcher kills the rank's process group: not this one
            _detach(keep=read_fd)  # neither the rank's output nor its PMI connection stays open here
            _watch(parent, read_fd)
        finally:
            os._exit(0)
    os.close(read_fd)
    os.set_inheritable(write_fd, survive_exec)
    _watcher_fd = write_fd
    atexit.register(_watcher_done)
    return pid


def _detach(keep: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def _watch(parent: int, fd: int) -> None:
    tracker = SegmentTracker()
    data = b""
    while True:
        ready, _, _ = select.select([fd], [], [], tracker.seconds_to_next(time.monotonic()))
        if not ready:
            tracker.scan([parent])
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        *lines, data = data.split(b"\n")
        tracker.segments.update(os.fsdecode(p) for p in lines if p.startswith(SHM_DIR.encode() + b"/"))
        if _DONE in lines:
            return
    tracker.remove()


def report_segments() -> None:
    """Hand the MPI segments this process maps to whoever removes them after an abnormal end (call
    right after MPI_Init; a one-off read of ``/proc/self/maps``): the rank's watcher (in-MPI mode), and
    the file the agent names in ``POPRUN_SEGMENTS_FILE`` (launcher mode), which the agent and its
    sweeper read, so that an agent killed before its own scan found them leaves none either."""
    from poprun_py.env import SEGMENTS_FILE

    listed = os.environ.get(SEGMENTS_FILE)
    if _watcher_fd is None and not listed:
        return
    paths = mapped_segments(os.getpid())
    if not paths:
        return
    data = b"".join(os.fsencode(p) + b"\n" for p in sorted(paths))
    if _watcher_fd is not None:
        try:
            os.write(_watcher_fd, data)
        except OSError:
            pass
    if listed:
        try:
            fd = os.open(listed, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError:
            pass


def listed_segments(path: str) -> set[str]:
    """The MPI segments listed in ``path`` (``report_segments``); only names of MPI segments directly
    in /dev/shm count, whatever else the file holds."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return set()
    return {line for line in lines
            if os.path.dirname(line) == SHM_DIR and os.path.basename(line).startswith(MPI_PREFIXES)}


def _watcher_done() -> None:
    """The interpreter exits normally: MPI_Finalize removes the segments itself."""
    global _watcher_fd
    if _watcher_fd is not None:
        try:
            os.write(_watcher_fd, _DONE + b"\n")
            os.close(_watcher_fd)
        except OSError:
            pass
        _watcher_fd = None
