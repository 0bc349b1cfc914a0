"""The environment contract between the launcher and the instances, in both directions.

This is the one module that reads ``os.environ``-style mappings. ``instance_env`` writes the
``POPDIST_*``/``POPRUN_*`` variables an instance receives; ``read_env`` reads them back inside the
instance (outside any launcher: one instance, one replica); ``detect_rank`` reads the rank and
size that MPI or Slurm gave a process; ``option_defaults`` reads ``POPRUN_<OPTION>`` defaults;
``popdist_choice`` and ``python_path_with_popdist`` decide what ``import popdist`` gives a program
(poprun_py/_popdist_shim/popdist/__init__.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from poprun_py.errors import EnvironmentContractError
from poprun_py.topology import InstanceInfo, single_instance

if TYPE_CHECKING:
    from poprun_py.faults import Fault

# PopDist's names, as PopRun sets them (docs/sources.md §9).
NUM_TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
NUM_LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
NUM_IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
UNIFORM_REPLICAS = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"
LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
# Ours: derivable from the above, but explicit is better for scripts and for checking MPI.
INSTANCE_INDEX = "POPDIST_INSTANCE_INDEX"
NUM_INSTANCES = "POPDIST_NUM_INSTANCES"
DEVICE_ID = "POPRUN_DEVICE_ID"
ILD_INDEX = "POPRUN_ILD_INDEX"
SYSTEM = "POPRUN_SYSTEM"
HOST = "POPRUN_HOST"
RUN_ID = "POPRUN_RUN_ID"
RESTART_COUNT = "POPRUN_RESTART_COUNT"
EXECUTABLE_CACHE_PATH = "POPRUN_EXECUTABLE_CACHE_PATH"
# Runtime plumbing set by the per-instance agent.
PROGRESS_FD = "POPRUN_PROGRESS_FD"
ERROR_FILE = "POPRUN_ERROR_FILE"
UNDER_AGENT = "POPRUN_UNDER_AGENT"
JOB_TOKEN = "POPRUN_JOB_TOKEN"  # marks every process of one instance, for the sweeper
SEGMENTS_FILE = "POPRUN_SEGMENTS_FILE"  # the program lists its MPI segments there (poprun_py/shm.py)
FAULT = "POPRUN_FAULT"  # an injected fault for recovery tests (poprun_py/faults.py)
# Which `import popdist` a program gets: auto = a real PopDist SDK if one is installed, else
# poprun_py's; ours = poprun_py's; sdk = the SDK's or an ImportError. Set for the launcher (or the
# MPI launcher in in-MPI mode); every instance inherits it.
CHOOSE_POPDIST = "POPRUN_POPDIST"
CHOOSE_POPDIST_VALUES = ("auto", "ours", "sdk")
SHIM_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_popdist_shim")

OPTION_PREFIX = "POPRUN_"


def instance_env(
    info: InstanceInfo, *, run_id: str, restart_count: int = 0, executable_cache_path: str | None = None
) -> dict[str, str]:
    """The variables one instance receives, as strings."""
    env = {
        NUM_TOTAL_REPLICAS: str(info.num_total_replicas),
        NUM_LOCAL_REPLICAS: str(info.num_local_replicas),
        NUM_IPUS_PER_REPLICA: str(info.ipus_per_replica),
        REPLICA_INDEX_OFFSET: str(info.replica_offset),
        UNIFORM_REPLICAS: "1",
        LOCAL_INSTANCE_INDEX: str(info.local_index),
        INSTANCE_INDEX: str(info.index),
        NUM_INSTANCES: str(info.num_instances),
        DEVICE_ID: str(info.device_id),
        ILD_INDEX: str(info.ild),
        SYSTEM: info.system,
        HOST: info.host,
        RUN_ID: run_id,
        RESTART_COUNT: str(restart_count),
        "PYTHONUNBUFFERED": "1",
    }
    if executable_cache_path:
        env[EXECUTABLE_CACHE_PATH] = executable_cache_path
    return env


ALONE = single_instance(1)  # outside any launcher: one instance with one replica (PopDist's answer)


class DistInfo(NamedTuple):
    """What an instance knows about the job, read once from its environment.

    ``placement`` is the instance's ``InstanceInfo`` as the launcher computed it; the properties
    are PopDist's names for its fields. The records of this module are named tuples, not
    dataclasses: the agent imports this module at every instance's start (``InstanceInfo``).
    """

    is_set: bool
    placement: InstanceInfo = ALONE
    run_id: str = ""
    restart_count: int = 0
    under_agent: bool = False

    @property
    def instance_index(self) -> int:
        return self.placement.index

    @property
    def num_instances(self) -> int:
        return self.placement.num_instances

    @property
    def num_total_replicas(self) -> int:
        return self.placement.num_total_replicas

    @property
    def num_local_replicas(self) -> int:
        return self.placement.num_local_replicas

    @property
    def replica_index_offset(self) -> int:
        return self.placement.replica_offset

    @property
    def ipus_per_replica(self) -> int:
        return self.placement.ipus_per_replica

    @property
    def local_instance_index(self) -> int:
        return self.placement.local_index

    @property
    def device_id(self) -> int:
        return self.placement.device_id

    @property
    def system(self) -> str:
        return self.placement.system


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvironmentContractError(f"{name}={raw!r} is not an integer") from None


def read_env(environ: Mapping[str, str]) -> DistInfo:
    """Read the contract back into the launcher's placement. Missing variables mean a single
    instance with one replica."""
    if NUM_TOTAL_REPLICAS not in environ:
        return DistInfo(is_set=False)
    total = _int(environ, NUM_TOTAL_REPLICAS, 1)
    local = _int(environ, NUM_LOCAL_REPLICAS, 1)
    offset = _int(environ, REPLICA_INDEX_OFFSET, 0)
    if local < 1 or total < local or total % local or offset % local or offset >= total:
        raise EnvironmentContractError(
            f"inconsistent PopDist variables: {NUM_TOTAL_REPLICAS}={total}, {NUM_LOCAL_REPLICAS}={local}, "
            f"{REPLICA_INDEX_OFFSET}={offset}; launch through poprun_py, or set them so that the total is a "
            "multiple of the local count and the offset is a multiple of the local count below the total"
        )
    index = _int(environ, INSTANCE_INDEX, offset // local)
    count = _int(environ, NUM_INSTANCES, total // local)
    if index != offset // local or count != total // local:
        raise EnvironmentContractError(
            f"{INSTANCE_INDEX}={index} / {NUM_INSTANCES}={count} disagree with the replica layout "
            f"(offset {offset} // local {local} = {offset // local}, total {total} // local {local} = "
            f"{total // local})"
        )
    placement = InstanceInfo(
        index=index, num_instances=count, host=environ.get(HOST, ""),
        local_index=_int(environ, LOCAL_INSTANCE_INDEX, 0), num_local_replicas=local, replica_offset=offset,
        num_total_replicas=total, ipus_per_replica=_int(environ, NUM_IPUS_PER_REPLICA, 1),
        ild=_int(environ, ILD_INDEX, 0), device_id=_int(environ, DEVICE_ID, 0), system=environ.get(SYSTEM, ""),
    )
    return DistInfo(is_set=True, placement=placement, run_id=environ.get(RUN_ID, ""),
                    restart_count=_int(environ, RESTART_COUNT, 0), under_agent=environ.get(UNDER_AGENT) == "1")


class RankInfo(NamedTuple):
    """The rank, size and local rank a process received from an MPI launcher or Slurm."""

    rank: int
    size: int
    local_rank: int
    source: str  # which launcher's variables were read


# Innermost launcher first: an mpirun inside an srun step sets both, and the MPI rank is the truth.
_RANK_SOURCES = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MPICH/Hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("PMIx", "PMIX_RANK", "PMI_SIZE", "PMIX_LOCAL_RANK"),
    ("Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
)


def detect_rank(environ: Mapping[str, str]) -> RankInfo | None:
    """The rank this process has under mpirun/mpiexec/srun, or None when there is none.

    Open MPI, MPICH (Hydra), MVAPICH, PMIx and Slurm variables are read, MPI before Slurm. Slurm
    counts only inside a job step (``srun``), not in the batch script itself, and a PMIx rank
    without a size is taken with ``OMPI_COMM_WORLD_SIZE`` or ``SLURM_STEP_NUM_TASKS``.
    """
    for source, rank_var, size_var, local_var in _RANK_SOURCES:
        if rank_var not in environ:
            continue
        size_raw = environ.get(size_var)
        if source == "PMIx":
            size_raw = size_raw or environ.get("OMPI_COMM_WORLD_SIZE") or environ.get("SLURM_STEP_NUM_TASKS")
        if not size_raw:
            continue
        rank, size = _int(environ, rank_var, 0), int(size_raw)
        if not 0 <= rank < size:
            raise EnvironmentContractError(f"{rank_var}={rank} is outside 0..{size - 1} ({size_var}={size})")
        return RankInfo(rank=rank, size=size, local_rank=_int(environ, local_var, 0), source=source)
    return None


def read_fault(environ: Mapping[str, str]) -> Fault | None:
    """The injected fault meant for this instance in this attempt, if ``POPRUN_FAULT`` names one."""
    raw = environ.get(FAULT)
    if not raw:
        return None
    from poprun_py.faults import parse_fault  # only where a fault is asked for

    try:
        fault = parse_fault(raw)
    except ValueError as err:
        raise EnvironmentContractError(f"{FAULT}={raw!r}: {err}") from None
    here = (_int(environ, INSTANCE_INDEX, 0), _int(environ, RESTART_COUNT, 0))
    return fault if fault.hits(*here) else None


def popdist_choice(environ: Mapping[str, str]) -> str:
    """``POPRUN_POPDIST``: auto (the default), ours or sdk."""
    raw = environ.get(CHOOSE_POPDIST, "").strip().lower() or "auto"
    if raw not in CHOOSE_POPDIST_VALUES:
        raise EnvironmentContractError(
            f"{CHOOSE_POPDIST}={environ[CHOOSE_POPDIST]!r}: use auto (a PopDist SDK wins where installed), "
            "ours (poprun_py's popdist) or sdk (the SDK's, an error without it)")
    return raw


def with_popdist(path: list[str], choice: str) -> list[str]:
    """``path`` (``sys.path`` or ``PYTHONPATH``'s entries) with the folder of poprun_py's ``popdist``:
    first for ``ours``, else last, so that another ``popdist`` on the path (an SDK, the user's) wins;
    the package itself also defers to one installed after it (auto, sdk). The folder holds nothing else."""
    rest = [p for p in path if p != SHIM_FOLDER]
    return [SHIM_FOLDER, *rest] if choice == "ours" else [*rest, SHIM_FOLDER]


def python_path_with_popdist(pythonpath: str | None, choice: str) -> str:
    """``PYTHONPATH`` for a program: ``with_popdist`` of its entries."""
    return os.pathsep.join(with_popdist(pythonpath.split(os.pathsep) if pythonpath else [], choice))


def temp_root(environ: Mapping[str, str]) -> str:
    """Where an instance's private working folder goes: ``TMPDIR``, else /tmp."""
    return environ.get("TMPDIR") or "/tmp"


def option_defaults(environ: Mapping[str, str], dests: list[str]) -> dict[str, str]:
    """``POPRUN_<DEST>`` values for launcher options (``POPRUN_NUM_INSTANCES=2``)."""
    return {d: environ[OPTION_PREFIX + d.upper()] for d in dests if OPTION_PREFIX + d.upper() in environ}
