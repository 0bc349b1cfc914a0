"""Finding the MPI launcher and building the argument list that starts the instances."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from poprun_py.config import LaunchConfig
from poprun_py.errors import ConfigError

logger = logging.getLogger(__name__)

HYDRA = "hydra"  # MPICH, Intel MPI, MVAPICH's mpiexec.hydra
OPENMPI = "openmpi"
# Variables Open MPI must be told to forward to remote ranks (Hydra forwards everything).
FORWARDED_ENV = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS")


def find_mpiexec(requested: str | None, python: str = sys.executable) -> str:
    """The MPI launcher to use: --mpiexec, else the venv's (mpich wheel), else the one on PATH."""
    if requested:
        found = shutil.which(requested)
        if found is None:
            raise ConfigError(f"--mpiexec {requested!r} was not found or is not executable: give its full path")
        return found
    beside = os.path.join(os.path.dirname(python), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    raise ConfigError(
        "no MPI launcher found: `pip install mpich` puts mpiexec in this environment, or pass "
        "--mpiexec /path/to/your/cluster/mpiexec (or set POPRUN_MPIEXEC)"
    )


def parse_flavor(version_text: str) -> str:
    """Which MPI a launcher belongs to, from what ``mpiexec --version`` prints."""
    text = version_text.lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text:
        return OPENMPI
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return HYDRA
    logger.warning("could not tell which MPI %r belongs to; assuming MPICH/Hydra options", version_text[:80])
    return HYDRA


def detect_flavor(mpiexec: str) -> str:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"cannot run {mpiexec} --version ({err}): check --mpiexec") from None
    return parse_flavor(out.stdout + out.stderr)


def agent_command(spec_json: str, program: tuple[str, ...], python: str = sys.executable) -> list[str]:
    """What each MPI rank runs: the per-instance agent, which runs the program."""
    return [python, "-m", "poprun_py.agent", spec_json, "--", *program]


def build_mpiexec_argv(
    config: LaunchConfig,
    *,
    mpiexec: str,
    flavor: str,
    rank_command: list[str],
    environ: Mapping[str, str],
    is_root: bool = False,
) -> list[str]:
    """The complete MPI command: an argument list, never a shell string.

    One app context of ``num_instances`` ranks, all running ``rank_command`` (the agent computes
    its own instance's environment from its rank). Hosts get ``instances / hosts`` consecutive
    ranks each. The user's --mpi-global-args go before the app context, --mpi-local-args inside it.
    """
    per_host = config.num_instances // len(config.hosts)
    multi_host = config.hosts != ("localhost",)
    host_list = ",".join(f"{h}:{per_host}" for h in config.hosts)
    if flavor == OPENMPI:
        argv = [mpiexec, "--bind-to", "none", "--oversubscribe"]
        if is_root:
            argv.append("--allow-run-as-root")
        if multi_host:
            argv += ["-H", host_list]
        for name in FORWARDED_ENV:
            if name in environ:
                argv += ["-x", name]
        argv += [*config.mpi_global_args, "-np", str(config.num_instances), *config.mpi_local_args]
    else:
        argv = [mpiexec]
        if multi_host:
            argv += ["-hosts", host_list]
        argv += [*hydra_compatible(config.mpi_global_args), "-n", str(config.num_instances), *config.mpi_local_args]
    return argv + rank_command


# Open MPI options that PopRun scripts pass and that Hydra rejects; our output is always tagged.
_OPENMPI_ONLY = {"--tag-output", "--allow-run-as-root", "--oversubscribe"}


def hydra_compatible(args: tuple[str, ...]) -> list[str]:
    """Drop Open MPI-only flags that PopRun job scripts commonly pass, when running on Hydra."""
    kept = [a for a in args if a not in _OPENMPI_ONLY]
    if len(kept) != len(args):
        logger.info("ignoring Open MPI-only options for MPICH: %s", sorted(set(args) - set(kept)))
    return kept
