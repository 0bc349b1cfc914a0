"""Checks made on every host before a multi-host job starts (``--preflight``).

Before the first attempt, the launcher starts one small rank per host through the same MPI
launcher, with the same MPI options, as the job will use; each rank checks what the job needs
on its host and reports back, and the job starts only if every host answered without a
problem. This turns the usual multi-host failures (ssh asks for a password or is refused,
the venv or the code is not at the same path on a node, a poprun_py of another version there)
into one message naming each host and the fix, before anything is started.

On each host: the interpreter at the launcher's path runs and imports poprun_py of the same
version (else the rank cannot even report), the working directory exists, the program is found
(a path, a name on that host's ``PATH``, a ``.py`` script, a ``-m`` module), and the log
directory can be written.

``python -m poprun_py.preflight SPEC_JSON`` is the per-host side (started by the launcher).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from poprun_py import __version__, wire
from poprun_py.python_program import OWN_PACKAGES, wrap_python
from poprun_py.config import LaunchConfig
from poprun_py.env import detect_rank
from poprun_py.errors import plural
from poprun_py.mpi_command import build_mpiexec_argv

logger = logging.getLogger(__name__)

PREFLIGHT = "preflight"  # wire record: i, host, problems (list[str])
PREFLIGHT_TIMEOUT_S = 60.0
MPI_TAIL_LINES = 8
SAME_PATHS_HINT = ("every host needs passwordless ssh from this one (`ssh -o BatchMode=yes HOST true` must "
                   "succeed) and the same paths: the venv, the code and the data; skip these checks with "
                   "--preflight no")


def program_problems(program: tuple[str, ...] | list[str], cwd: str, *, modules: bool = False) -> list[str]:
    """What keeps ``program`` from starting on this host (empty when nothing does).

    With ``modules``, ``python -m pkg.mod`` is also looked up (which imports ``pkg``: done in the
    pre-flight ranks only, never in the launcher itself).
    """
    head = program[0]
    if head.endswith(".py"):
        if not os.path.exists(head):
            return [f"program {head!r} not found (working directory {cwd})"]
        return []
    ours = wrap_python(list(program)) != list(program)  # a bare `python` means this interpreter
    if not ours and shutil.which(head) is None:
        return [f"program {head!r} not found on PATH or not executable: give its path"]
    if not os.path.basename(head).startswith("python"):
        return []
    args = list(program[1:])
    for k, arg in enumerate(args):
        if arg == "-m" and k + 1 < len(args):
            return _module_problems(args[k + 1], cwd) if modules else []
        if arg.endswith(".py") or not arg.startswith("-"):
            break
    script = next((a for a in args if a.endswith(".py")), None)
    if script and not os.path.exists(script):
        return [f"script {script!r} not found (working directory {cwd})"]
    return []


def _module_problems(module: str, cwd: str) -> list[str]:
    if module.split(".")[0] not in OWN_PACKAGES and cwd not in sys.path:
        sys.path.insert(0, cwd)  # `python -m` looks in the working directory first (not for ours: bootstrap)
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as err:
        return [f"module {module!r} cannot be imported here ({type(err).__name__}: {err})"]
    return [] if found else [f"module {module!r} not found (working directory {cwd}, sys.path of {sys.executable})"]


def check_host(spec: dict) -> list[str]:
    """The per-host checks; ``spec`` holds what the launcher expects (version, cwd, program, log dir)."""
    problems = []
    if spec["version"] != __version__:
        problems.append(f"poprun_py {__version__} is installed at {sys.executable}, the launcher runs "
                        f"{spec['version']}: install the same version on every host")
    cwd = spec["cwd"]
    if os.getcwd() != cwd:
        problems.append(f"working directory {cwd} does not exist here (the rank started in {os.getcwd()})")
        return problems
    problems += program_problems(spec["program"], cwd, modules=True)
    log_dir = spec.get("log_dir")
    if log_dir:
        try:
            os.makedirs(log_dir, exist_ok=True)
            if not os.access(log_dir, os.W_OK):
                problems.append(f"--log-dir {log_dir} is not writable")
        except OSError as err:
            problems.append(f"--log-dir {log_dir} cannot be created ({err.strerror})")
    return problems


def preflight_argv(config: LaunchConfig, *, mpiexec: str, flavor: str, python: str) -> list[str]:
    """The MPI command of the checks: one rank per host, through the job's own MPI options."""
    spec = {"version": __version__, "cwd": os.getcwd(), "program": list(config.program), "log_dir": config.log_dir}
    one_per_host = dataclasses.replace(config, num_instances=len(config.hosts))
    return build_mpiexec_argv(one_per_host, mpiexec=mpiexec, flavor=flavor,
                              rank_command=[python, "-m", "poprun_py.preflight", json.dumps(spec)],
                              environ=os.environ, is_root=os.geteuid() == 0)


def run_preflight(config: LaunchConfig, *, mpiexec: str, flavor: str, python: str = sys.executable,
                  timeout: float = PREFLIGHT_TIMEOUT_S) -> list[str]:
    """Run the checks on every host; the problems found, one line each, naming the host."""
    argv = preflight_argv(config, mpiexec=mpiexec, flavor=flavor, python=python)
    logger.info("Pre-flight checks on %s: %s", plural(len(config.hosts), "host"), json.dumps(argv))
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    try:  # host starts still in flight (an ssh to a slow host) end with the checks
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    reports: dict[int, dict] = {}
    other: list[str] = []
    for line in (out + err).splitlines():
        record = wire.decode(line)
        if record and record.get("t") == PREFLIGHT and isinstance(record.get("i"), int):
            reports[record["i"]] = record
        elif line.strip():
            other.append(line.decode(errors="replace").rstrip())
    problems = []
    unreachable = unreachable_hosts(other, config.hosts)
    unexplained = False
    for rank, host in enumerate(config.hosts):
        if rank in reports:
            problems += [f"host {host}: {p}" for p in reports[rank].get("problems", [])]
        elif host in unreachable:
            problems.append(ssh_problem(host, unreachable[host].strip()))
        elif unreachable:
            problems.append(f"host {host}: not checked (the MPI launcher gave up when "
                            f"{', '.join(unreachable)} failed)")
        else:
            why = f"within {timeout:g} s" if timed_out else f"({os.path.basename(mpiexec)} exited with status " \
                  f"{proc.returncode})"
            problems.append(f"host {host}: no answer {why}; cannot run {python} there")
            unexplained = True
    if unexplained and other:  # ssh's own words already lead each unreachable host's line
        problems.append("last messages of the MPI launcher:")
        problems += ["  " + line for line in other[-MPI_TAIL_LINES:]]
    logger.info("Pre-flight checks took %.1f s: %s", time.monotonic() - started,
                "problems found" if problems else "every host is ready")
    return problems


def unreachable_hosts(lines: list[str], hosts) -> dict[str, str]:
    """The hosts of ``hosts`` that an ssh error among ``lines`` (an MPI launcher's output) names, each
    with the last such line."""
    return {host: line for host in hosts for line in lines if _names_host(line, host)}


def _names_host(line: str, host: str) -> bool:
    """An ssh error about ``host`` ("ssh: connect to host b port 22: ...", "ssh: Could not resolve hostname b").

    Host names are compared without case: ssh prints them lower-cased (``-H nodeA`` gives ``nodea``).
    """
    return "ssh" in line.lower() and re.search(
        rf"(?<![\w.-]){re.escape(host)}(?![\w-]|\.\w)", line, flags=re.IGNORECASE) is not None


def ssh_problem(host: str, line: str) -> str:
    """One host's ssh failure, cause first, with the fix: ``host X: name not resolved: ...``."""
    low = line.lower()
    if "could not resolve hostname" in low or "name or service not known" in low:
        return (f"host {host}: name not resolved: {line}; check the name in -H/--hostfile, and that "
                f"`getent hosts {host}` prints its address here (DNS or /etc/hosts)")
    if "permission denied" in low or "host key verification failed" in low:
        return (f"host {host}: ssh login refused: {line}; set up passwordless ssh: "
                f"`ssh -o BatchMode=yes {host} true` must succeed")
    return (f"host {host}: unreachable: {line}; check that {host} is up and runs sshd: "
            f"`ssh -o BatchMode=yes {host} true` must succeed")


def format_problems(problems: list[str], num_hosts: int) -> str:
    failing = {p.split(":", 1)[0] for p in problems if p.startswith("host ") and "not checked" not in p}
    return "\n".join([f"pre-flight checks failed on {len(failing)} of {plural(num_hosts, 'host')}:",
                      *("  " + p for p in problems), SAME_PATHS_HINT])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import socket  # the per-host check only: the launcher imports this module for program_problems

    spec = json.loads(argv[0])
    rank = detect_rank(os.environ)
    record = wire.encode(PREFLIGHT, i=rank.rank if rank else 0, host=socket.gethostname(),
                         problems=check_host(spec))
    os.write(1, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
