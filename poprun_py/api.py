"""The runtime API training scripts call: PopDist's functions, in snake_case and camelCase.

A script written for Graphcore's PopDist runs unchanged apart from ``import poprun_py as popdist``.
Outside any launcher it reports a single instance with one replica.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from poprun_py import env as envc
from poprun_py.comm import Communicator, LoopbackComm
from poprun_py.errors import EnvironmentContractError, plural
from poprun_py.progress import report_progress

T = TypeVar("T")

_info: envc.DistInfo | None = None
_world: Communicator | None = None
_subs: dict[frozenset[int], Communicator | None] = {}
_current: contextvars.ContextVar[Communicator | None] = contextvars.ContextVar("poprun_comm", default=None)


def _dist() -> envc.DistInfo:
    global _info
    if _info is None:
        _info = envc.read_env(os.environ)
    return _info


def is_popdist_env_set() -> bool:
    """True when this process was started by poprun_py (or under MPI through it)."""
    return _dist().is_set


def init() -> envc.DistInfo:
    """Read the environment and connect the instances (MPI for more than one). Idempotent."""
    get_comm()
    return _dist()


def finalize() -> None:
    """Release the communicator; MPI itself is finalised at interpreter exit."""
    global _world
    _world = None
    _subs.clear()


def get_comm() -> Communicator:
    """The communicator of the instances (the restricted one inside ``execute_on_instances``)."""
    global _world
    current = _current.get()
    if current is not None:
        return current
    if _world is None:
        info = _dist()
        _world = LoopbackComm() if info.num_instances == 1 else _mpi_world(info)
    return _world


def _mpi_world(info: envc.DistInfo) -> Communicator:
    try:
        from poprun_py.comm import MPIComm

        comm = MPIComm()
    except ImportError as err:
        raise RuntimeError(f"{info.num_instances} instances need mpi4py ({err}): pip install mpi4py mpich") from None
    if comm.size != info.num_instances or comm.rank != info.instance_index:
        raise EnvironmentContractError(
            f"MPI says rank {comm.rank} of {comm.size} but the PopDist environment says instance "
            f"{info.instance_index} of {info.num_instances}: start the job with poprun_py, or with "
            f"`mpirun -n {info.num_instances} poprun_py ...`, not by hand-setting POPDIST_* variables")
    return comm


def get_num_instances() -> int:
    return _dist().num_instances


def get_instance_index() -> int:
    return _dist().instance_index


def get_local_instance_index() -> int:
    return _dist().local_instance_index


def get_num_total_replicas() -> int:
    return _dist().num_total_replicas


def get_num_local_replicas() -> int:
    return _dist().num_local_replicas


def get_replica_index_offset() -> int:
    return _dist().replica_index_offset


def get_num_ipus_per_replica() -> int:
    return _dist().ipus_per_replica


def check_num_ipus_per_replica(ipus_per_replica: int) -> bool:
    """False when the launcher set a different number of IPUs per replica."""
    info = _dist()
    return not info.is_set or info.ipus_per_replica == ipus_per_replica


def get_device_id(ipus_per_replica: int = 0) -> int:
    """The id of the multi-IPU device holding this instance's replicas (see topology.device_id)."""
    info = _dist()
    if ipus_per_replica and info.is_set and ipus_per_replica != info.ipus_per_replica:
        raise ValueError(
            f"get_device_id({ipus_per_replica}) but the job runs {plural(info.ipus_per_replica, 'IPU')} per replica: "
            f"pass --ipus-per-replica {ipus_per_replica} to poprun_py or drop the argument")
    return info.device_id


def execute_on_instances(instances: Iterable[int], func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """Run ``func`` only on the given instances; collectives inside it involve only them.

    Every instance must call this (building the restricted communicator is collective); the
    others get None. Typical use: ``execute_on_instances({0}, save_checkpoint, path)``.
    """
    wanted = frozenset(int(i) for i in instances)
    bad = [i for i in wanted if not 0 <= i < get_num_instances()]
    if bad:
        raise ValueError(f"execute_on_instances: instances {sorted(bad)} do not exist (0..{get_num_instances() - 1})")
    world = get_comm()
    if wanted not in _subs:
        _subs[wanted] = world.split(wanted)
    sub = _subs[wanted]
    if sub is None:
        return None
    token = _current.set(sub)
    try:
        return func(*args, **kwargs)
    finally:
        _current.reset(token)


@contextlib.contextmanager
def _reset_for_tests():
    """Forget the cached environment and communicator (tests that change os.environ)."""
    global _info, _world
    saved = (_info, _world, dict(_subs))
    _info, _world = None, None
    _subs.clear()
    try:
        yield
    finally:
        _info, _world = saved[0], saved[1]
        _subs.clear()
        _subs.update(saved[2])


# Graphcore's names.
isPopdistEnvSet = is_popdist_env_set
getNumInstances = get_num_instances
getInstanceIndex = get_instance_index
getLocalInstanceIndex = get_local_instance_index
getNumTotalReplicas = get_num_total_replicas
getNumLocalReplicas = get_num_local_replicas
getReplicaIndexOffset = get_replica_index_offset
getNumIpusPerReplica = get_num_ipus_per_replica
checkNumIpusPerReplica = check_num_ipus_per_replica
getDeviceId = get_device_id
initializeBackend = init
finalizeBackend = finalize
reportProgress = report_progress
