"""Running a Python program so that one instance's failure cannot hang the others.

``python -m poprun_py.bootstrap script.py args`` (or ``-m module args``) runs the program with:
faulthandler on (native crashes print a Python traceback); an uncaught exception or a non-zero
``sys.exit`` written to the error file the agent reads (type, message, traceback) and then a hard
exit, so that MPI's finalisation cannot deadlock against peers blocked in a collective; and, when
there is no agent above it (``mpirun -n 4 poprun_py train.py``), ``MPI_Abort`` so that the MPI
launcher stops the other ranks. This is what ``python -m mpi4py`` does, plus the error report.

Names cannot clash: a module of this distribution (``launch.train``, ``ipu``, ``data``, ...) runs
without the working directory on ``sys.path``, so a user's own ``models/`` or ``data/`` package
there cannot stand in for ours; any other module runs as ``python -m`` would run it (working
directory first), a script with its own folder first and no working directory, as ``python
script.py`` would. A console script installed next to this interpreter (``poprun-train``) runs as
the Python script it is.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import runpy
import shutil
import sys
import time
import traceback

from poprun_py import env as envc
from poprun_py.errors import EXIT_INTERRUPTED
from poprun_py.shm import remove_own_segments

_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
# The top-level packages this distribution installs: their modules never see the working directory.
OWN_PACKAGES = ("poprun_py", "launch", "ipu", "models", "data", "jit")
_NO_ARG_FLAGS = {"-u", "-B", "-O", "-OO", "-s", "-S", "-E", "-I", "-b", "-bb", "-q", "-R", "-P"}


def wrap_python(program: list[str], python: str = sys.executable) -> list[str]:
    """Route a Python program through this module; leave anything else untouched.

    ``script.py args`` runs with this interpreter. ``python [flags] script.py`` and
    ``python [flags] -m module`` are wrapped when ``python`` is this interpreter: a bare name
    (``python``, ``python3``, ``python3.11`` of this version) or a path in this interpreter's
    directory. A path to another interpreter is left alone.
    """
    if not program:
        return program
    head = program[0]
    if head.endswith(".py") and not _PYTHON_NAME.match(os.path.basename(head)):
        return [python, "-m", "poprun_py.bootstrap", *program]
    script = console_script(head, python)
    if script is not None:
        return [python, "-m", "poprun_py.bootstrap", script, *program[1:]]
    if not _PYTHON_NAME.match(os.path.basename(head)) or not _same_interpreter(head, python):
        return program
    flags = []
    rest = program[1:]
    while rest and rest[0] in _NO_ARG_FLAGS:
        flags.append(rest.pop(0))
    if rest and (rest[0] == "-m" and len(rest) > 1 or rest[0].endswith(".py")):
        return [python, *flags, "-m", "poprun_py.bootstrap", *rest]
    return program


def console_script(name: str, python: str = sys.executable) -> str | None:
    """The path of ``name`` when it is a console script of this interpreter's environment (a Python
    script in the interpreter's folder whose ``#!`` line names a python there), else None.

    A bare name is looked up in that folder (so ``poprun-train`` works without activating the venv),
    then on ``PATH``.
    """
    if _PYTHON_NAME.match(os.path.basename(name)):
        return None
    folder = os.path.dirname(os.path.abspath(python))
    if os.sep in name:
        path = name
    else:
        beside = os.path.join(folder, name)
        path = beside if os.path.isfile(beside) else shutil.which(name)
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    interpreter = first[2:].decode(errors="replace").strip().split()[0] if first[2:].strip() else ""
    if not _PYTHON_NAME.match(os.path.basename(interpreter)) or os.path.dirname(interpreter) != folder:
        return None
    return os.path.abspath(path)


def _same_interpreter(head: str, python: str) -> bool:
    if os.sep not in head:
        version = head[len("python"):]
        this = f"{sys.version_info.major}.{sys.version_info.minor}"
        return version in ("", str(sys.version_info.major), this)
    return os.path.dirname(os.path.abspath(head)) == os.path.dirname(os.path.abspath(python))


def _write_error(kind: str, message: str, tb: str) -> None:
    path = os.environ.get(envc.ERROR_FILE)
    if not path:
        return
    record = {"type": kind, "message": message, "traceback": tb, "time": time.time()}
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass


def _finish(code: int) -> None:
    """Leave now, without running MPI finalisation that could wait forever for peers.

    The job is ending abnormally, so MPI's shared-memory files (which only ``MPI_Finalize`` would
    remove) are removed first, those this process maps (poprun_py/shm.py); then, without an agent
    above, ``MPI_Abort`` stops the other ranks.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        remove_own_segments()
        if os.environ.get(envc.UNDER_AGENT) != "1" and mpi.COMM_WORLD.Get_size() > 1:
            mpi.COMM_WORLD.Abort(code)
    os._exit(code)


def run(target: list[str], *, as_module: bool) -> None:
    """Run a script or module as ``__main__`` under the failure hooks; never returns on failure."""
    faulthandler.enable()
    name = target[0]
    sys.argv = list(target)
    try:
        if as_module:
            if name.split(".")[0] not in OWN_PACKAGES:
                sys.path.insert(0, os.getcwd())  # what ``python -m`` does for the user's own modules
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
            runpy.run_path(name, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            raise
        if not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        _write_error("SystemExit", f"sys.exit({exc.code!r})", "")
        _finish(code)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, not the traceback of wherever it landed
        sys.stderr.write(interrupted_message() + "\n")
        _write_error("KeyboardInterrupt", "interrupted (SIGINT)", _user_traceback(exc))
        _finish(EXIT_INTERRUPTED)
    except BaseException as exc:  # noqa: BLE001 - report everything, then leave hard
        tb = _user_traceback(exc)
        sys.stderr.write(tb)
        _write_error(type(exc).__name__, str(exc), tb)
        _finish(1)


def interrupted_message() -> str:
    """``poprun_py: instance 1 of 2 (pid 4242): interrupted (SIGINT)``; outside a job, no instance."""
    index, count = os.environ.get(envc.INSTANCE_INDEX), os.environ.get(envc.NUM_INSTANCES)
    who = f"instance {index} of {count} (pid {os.getpid()})" if index and count else f"pid {os.getpid()}"
    return f"poprun_py: {who}: interrupted (SIGINT); exit code {EXIT_INTERRUPTED}"


def _user_traceback(exc: BaseException) -> str:
    """The traceback without this module's and runpy's frames."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def main() -> None:
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]  # what ``python -m poprun_py.bootstrap`` put there; run() decides for the target
    args = sys.argv[1:]
    if not args or (args[0] == "-m" and len(args) < 2):
        print("usage: python -m poprun_py.bootstrap (script.py | -m module) [args...]", file=sys.stderr)
        sys.exit(2)
    if args[0] == "-m":
        run(args[1:], as_module=True)
    else:
        if not os.path.exists(args[0]):
            print(f"poprun_py: program {args[0]!r} not found", file=sys.stderr)
            sys.exit(127)
        run(args, as_module=False)


if __name__ == "__main__":
    main()
