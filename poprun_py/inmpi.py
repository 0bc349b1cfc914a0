"""In-MPI mode: ``mpirun -n 16 poprun_py train.py`` or ``srun -n 16 poprun_py train.py``.

The MPI launcher already started the processes; this one becomes instance ``rank`` of ``size``:
it sets the PopDist contract in its own environment and runs the program, a Python program
(``train.py``, ``python train.py``, ``python -m pkg.mod``) in this same interpreter (with the bootstrap's failure hooks, which call MPI_Abort so that the MPI
launcher stops every rank), anything else by ``exec``. With ``--hang-timeout`` a Python program
runs under a watchdog thread that aborts the job through MPI when the rank stalls (watchdog.py).

Each rank forks a watcher of MPI's shared-memory files first (``poprun_py.shm.start_watcher``):
a rank that is killed or aborted never reaches ``MPI_Finalize``, which is where MPICH removes
its ``/dev/shm/mpich_shm_*`` file, so the watcher removes it when the rank ends abnormally.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time

from poprun_py import env as envc
from poprun_py.bootstrap import run
from poprun_py.python_program import wrap_python
from poprun_py.config import LaunchConfig
from poprun_py.env import RankInfo
from poprun_py.shm import start_watcher
from poprun_py.topology import assign_instances
from poprun_py.watchdog import start_watchdog

logger = logging.getLogger(__name__)


def run_as_instance(config: LaunchConfig, rank: RankInfo | None, environ: dict[str, str]) -> int:
    index = rank.rank if rank else 0
    info = assign_instances(config)[index]._replace(
        host=socket.gethostname(), local_index=rank.local_rank if rank else 0)
    run_id = environ.get(envc.RUN_ID) or f"mpi-{time.strftime('%Y%m%d-%H%M%S')}"
    os.environ.update(envc.instance_env(info, run_id=run_id, executable_cache_path=config.executable_cache_path))
    _offer_popdist(envc.popdist_choice(os.environ))
    logger.info("instance %d of %d (%s ranks), replicas %s", index, config.num_instances,
                rank.source if rank else "no MPI", list(info.replicas))
    program = wrap_python(list(config.program))
    in_process = "poprun_py.bootstrap" in program
    if rank is not None and rank.size > 1:
        start_watcher(survive_exec=not in_process)
    if in_process:  # a Python program for this interpreter: run it right here
        if config.hang_timeout:
            start_watchdog(config.hang_timeout, index, config.num_instances, info.host)
        target = program[program.index("poprun_py.bootstrap") + 1 :]
        _release_logging()
        if target[0] == "-m":
            run(target[1:], as_module=True)
        else:
            run(target, as_module=False)
        return 0
    if config.hang_timeout:
        logger.warning("--hang-timeout watches Python programs only in in-MPI mode; %s runs unwatched", program[0])
    os.execvp(program[0], program)
    return 127  # not reached


def _offer_popdist(choice: str) -> None:
    """Make ``import popdist`` work in the program (poprun_py/_popdist_shim/popdist): on ``sys.path``
    for a Python program run here (last, after site-packages, unless ``ours``), and on
    ``PYTHONPATH`` for anything it starts or ``exec``s."""
    os.environ["PYTHONPATH"] = envc.python_path_with_popdist(os.environ.get("PYTHONPATH"), choice)
    sys.path[:] = envc.with_popdist(sys.path, choice)


def _release_logging() -> None:
    """Hand the root logger to the program as a fresh interpreter has it, so that its own
    ``logging.basicConfig`` takes effect (poprun_py's format and WARNING level would silence it)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
