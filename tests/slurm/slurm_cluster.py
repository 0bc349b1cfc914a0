"""A one-node Slurm cluster in a scratch directory, for tests (by hand: ``python -m tests.slurm.slurm_cluster``).

Everything lives under one folder: a munge key of its own and munged on its own socket, a
``slurm.conf`` with non-default ports, the controller's state, slurmd's spool, pid and log files.
Both daemons and munged run in the foreground as children of this process, so they are stopped by
pid; nothing is read from or written to ``/etc/slurm``, ``/etc/munge`` or ``/run``. Commands
(``srun``, ``sbatch``, ``scontrol``) find the cluster through ``SLURM_CONF`` (see ``env``).

The node: this host, all its CPUs, ``select/cons_tres`` with CPUs as the consumable,
``MpiDefault=pmi2``, ``proctrack/linuxproc`` (no cgroups needed), requeue allowed.

Waiting (``wait``) is driven by events (see ``events``): the daemons log at ``debug``, and each
state change the tests wait for is followed by a line in a log, written once the change is made:
- the node is idle: slurmctld's ``validate_node_specs: node <host> registered with <n> jobs``;
- a job has left the queue (ended, epilog run, no longer COMPLETING): slurmd's ``JobId=<id>: sent
  epilog complete msg``, written once the controller has answered that message;
- a step's tasks have started or ended: slurmstepd's lines in slurmd's log.

MPICH and Slurm job ids. Under ``srun --mpi=pmi2`` MPICH names its node-local start-up segment
``/dev/shm/mpich_shm_<FNV-1a hash of the PMI kvsname>_<node>``, and Slurm's kvsname is
``<job id>.<step id>``. MPI_Finalize unlinks it; a step whose processes are killed first (a crash,
srun ending the step after one task failed) leaves it behind. A cluster started from a fresh
state directory counts job ids from 1 again, so a later step with the same ids opens the stale
file as if a peer had just created it and dies in ``MPI_Init_thread`` (UCX "failed to unpack
address, invalid bandwidth", or "Message truncated"), whatever the program imported before. So
each cluster starts its job ids at a random ``FirstJobId`` and its epilog removes the segments
of the job's steps, as a site epilog that cleans ``/dev/shm`` would.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.slurm.events import Events

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo", "squeue", "scancel")


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def missing_programs() -> list[str]:
    """The programs a cluster needs that are not installed (``/usr/sbin`` included)."""
    return [name for name in PROGRAMS if _which(name) is None]


def skip_reason() -> str | None:
    missing = missing_programs()
    if missing:
        return (f"Slurm is not installed (missing {', '.join(missing)}): "
                "apt-get install -y slurm-wlm munge (.ci/run does it as root)")
    if os.geteuid() != 0:
        return "the one-node Slurm cluster runs slurmd, which needs root"
    return None


def free_ports(count: int) -> list[int]:
    """Ports that were free a moment ago (held open together so that they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


SLURM_CONF = """\
ClusterName=poprun-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=debug
SlurmdDebug=debug
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# the full scheduling pass every second, not every 60: a requeued job released with a begin time
# (test_slurm_preemption) starts then, where it waited up to a minute for the next pass
SchedulerParameters=sched_interval=1
JobRequeue=1
ReturnToService=2
KillWait=10
MinJobAge=300
InactiveLimit=0
SlurmdTimeout=60
FirstJobId={first_job_id}
Epilog={root}/epilog
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


class SlurmCluster:
    """Start with ``start()``, stop with ``stop()`` (or use as a context manager)."""

    def __init__(self, root: str | os.PathLike, cpus: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.cpus = cpus or len(os.sched_getaffinity(0))  # never more than slurmd finds, or the node drains
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.procs: dict[str, subprocess.Popen] = {}
        self.startup_s = float("nan")
        self.events: Events | None = None
        self.first_job_id = random.randrange(1_000, 60_000_000)

    # -- environment for clients -------------------------------------------------------------

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this environment) without Slurm job variables, pointed at this cluster."""
        out = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("SLURM_")}
        out["SLURM_CONF"] = str(self.conf)
        return out

    def run(self, *cmd: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("env", self.env())
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)

    def next_job_id(self) -> int:
        """The id the controller gives the next job."""
        for line in self.run("scontrol", "show", "config").stdout.splitlines():
            if line.startswith("NEXT_JOB_ID"):
                return int(line.split("=")[1])
        raise RuntimeError("scontrol show config printed no NEXT_JOB_ID")

    # -- start and stop ------------------------------------------------------------------------

    def start(self, timeout: float = 30) -> "SlurmCluster":
        started = time.perf_counter()
        for sub in ("munge", "state", "spool"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        self.events = Events().folder(self.root).folder(self.root / "munge")
        try:
            self._start_munge()
            ctld_port, slurmd_port = free_ports(2)
            self._write_epilog()
            self.conf.write_text(SLURM_CONF.format(host=self.host, ctld_port=ctld_port, slurmd_port=slurmd_port,
                                                   munge_socket=self.munge_socket, root=self.root, cpus=self.cpus,
                                                   first_job_id=self.first_job_id))
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host])
            self._wait_for_idle_node(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        munge = self.root / "munge"
        self._spawn("munged", [_which("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--log-file={munge / 'munged.log'}",
                               f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}"])
        self.wait(lambda: self.munge_socket.exists(), 10, "munged to create its socket")

    def _write_epilog(self) -> None:
        """An epilog that never fails: a failing epilog drains the node."""
        epilog = self.root / "epilog"
        epilog.write_text(f"""#!{sys.executable}
import os, sys
try:
    sys.path.insert(0, {str(Path(__file__).parents[2])!r})  # a script of its own: the repository's tests package
    from tests.slurm.slurm_cluster import remove_mpich_segments
    remove_mpich_segments(int(os.environ["SLURM_JOB_ID"]))
except Exception as err:
    print("epilog:", repr(err), file=sys.stderr)
""")
        os.chmod(epilog, 0o755)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        from poprun_py.processes import child_preexec  # the daemons die with this process, however it ends

        log = open(self.root / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                            start_new_session=True, preexec_fn=child_preexec(signal.SIGTERM))
        log.close()
        self.events.process(self.procs[name].pid)

    def _wait_for_idle_node(self, timeout: float) -> None:
        def idle() -> bool:
            proc = self.run("sinfo", "-h", "-N", "-o", "%T", timeout=10)
            return proc.returncode == 0 and proc.stdout.strip() == "idle"

        self.wait(idle, timeout, "the node to become idle")

    def wait(self, ready, timeout: float, what: str, *folders: str | os.PathLike) -> None:
        """Until ``ready()`` holds, checked again whenever a daemon writes its log, a file in one of
        ``folders`` changes (a job's output, say) or a daemon exits; fails at once, with its log,
        if a daemon has died, and after ``timeout`` seconds with the daemons' logs."""
        for folder in folders:
            self.events.folder(folder)

        def died() -> str | None:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    return f"{name} exited with code {proc.returncode}:\n{self.log(name)}"
            return None

        try:
            self.events.wait(ready, timeout, what, failed=died)
        except TimeoutError as err:
            raise TimeoutError(f"{err}:\n" + "\n".join(self.log(name) for name in self.procs)) from None

    def log(self, name: str) -> str:
        """The tail of a daemon's log files."""
        text = ""
        for path in (self.root / f"{name}.out", self.root / f"{name}.log", self.root / "munge" / f"{name}.log"):
            if path.exists():
                text += f"--- {path}\n" + path.read_text(errors="replace")[-4000:]
        return text

    def stop(self) -> list[str]:
        """Cancel every job, stop the daemons by pid (SIGTERM, then SIGKILL), then kill any step or
        task left behind; returns what had to be killed that way (``name[pid]``)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--quiet", "--partition=test", timeout=10)
            try:
                self.wait(lambda: not self.run("squeue", "-h", timeout=10).stdout.strip(), 30, "the jobs to end")
            except (TimeoutError, RuntimeError):
                pass  # their processes are killed below
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        killed = []
        for proc in leftover_processes(self.root):
            try:
                killed.append(f"{proc.name()}[{proc.pid}]")
                proc.kill()
            except Exception:  # noqa: BLE001 - gone already
                pass
        if self.events is not None:
            self.events.close()
            self.events = None
        return killed

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def kvs_hash(job_id: int, step: int) -> str:
    """MPICH's world id under Slurm's PMI: the 32-bit FNV-1a hash of the kvsname ``<job>.<step>``, in hex."""
    digest = 0x811C9DC5
    for byte in f"{job_id}.{step}".encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{digest:x}"


def mpich_segments(job_id: int, steps: int = 64) -> list[Path]:
    """MPICH's start-up segments in ``/dev/shm`` of steps 0..steps-1 of a job (see the module doc)."""
    found = []
    for step in range(steps):
        for kind in ("shm", "vci"):
            found += sorted(Path("/dev/shm").glob(f"mpich_{kind}_{kvs_hash(job_id, step)}_*"))
    return found


def remove_mpich_segments(job_id: int) -> None:
    """The epilog: once a job has ended, nothing may open its steps' segments again."""
    for path in mpich_segments(job_id):
        path.unlink(missing_ok=True)


def leftover_processes(root: Path) -> list:
    """Live processes that belong to the cluster under ``root``: slurmstepd (its sockets live in the
    spool) and anything started with ``SLURM_CONF`` pointing there."""
    import psutil

    conf, spool = str(root / "slurm.conf"), str(root / "spool")
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.info["name"] == "slurmstepd":
                if any(c.laddr and str(c.laddr).startswith(spool) for c in proc.net_connections("unix")):
                    found.append(proc)
            elif proc.environ().get("SLURM_CONF") == conf:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


if __name__ == "__main__":
    import tempfile

    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="slurm-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the cluster on SIGTERM too
    with SlurmCluster(folder) as cluster:
        print(f"cluster up in {cluster.startup_s:.2f} s; in another shell: export SLURM_CONF={cluster.conf}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
