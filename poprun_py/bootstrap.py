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
import runpy
import sys
import time
import traceback

from poprun_py import env as envc
from poprun_py.errors import EXIT_INTERRUPTED
from poprun_py.python_program import OWN_PACKAGES
from poprun_py.shm import remove_own_segments


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
