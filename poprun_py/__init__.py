"""poprun_py: a PopRun-style launcher and a PopDist-compatible runtime for simulated IPU-PODs.

Training scripts use it like Graphcore's PopDist::

    import poprun_py as popdist
    popdist.init()
    if popdist.isPopdistEnvSet():
        replicas = popdist.getNumLocalReplicas()
    comm = popdist.get_comm()          # allreduce / broadcast / allgather / barrier on numpy

The runtime API is loaded on first use, so that the launcher and the per-instance agent, which
import this package too, start without numpy.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = (
    "check_num_ipus_per_replica", "checkNumIpusPerReplica", "execute_on_instances", "finalize",
    "finalizeBackend", "get_comm", "get_device_id", "get_instance_index", "get_local_instance_index",
    "get_num_instances", "get_num_ipus_per_replica", "get_num_local_replicas", "get_num_total_replicas",
    "get_replica_index_offset", "getDeviceId", "getInstanceIndex", "getLocalInstanceIndex",
    "getNumInstances", "getNumIpusPerReplica", "getNumLocalReplicas", "getNumTotalReplicas",
    "getReplicaIndexOffset", "init", "initializeBackend", "is_popdist_env_set", "isPopdistEnvSet",
    "reportProgress",
)
_ELSEWHERE = {"Communicator": "poprun_py.comm", "LoopbackComm": "poprun_py.comm",
              "report_progress": "poprun_py.progress"}

__all__ = sorted([*_API, *_ELSEWHERE])


def __getattr__(name: str) -> object:  # (no typing import: the agent starts once per instance)
    if name in _API:
        return getattr(importlib.import_module("poprun_py.api"), name)
    if name in _ELSEWHERE:
        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'poprun_py' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
