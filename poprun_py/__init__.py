"""poprun_py: a PopRun-style launcher and a PopDist-compatible runtime for simulated IPU-PODs.

Training scripts use it like Graphcore's PopDist::

    import poprun_py as popdist
    popdist.init()
    if popdist.isPopdistEnvSet():
        replicas = popdist.getNumLocalReplicas()
    comm = popdist.get_comm()          # allreduce / broadcast / allgather / barrier on numpy
"""

__version__ = "0.1.0"

from poprun_py.api import (  # noqa: E402
    check_num_ipus_per_replica,
    checkNumIpusPerReplica,
    execute_on_instances,
    finalize,
    finalizeBackend,
    get_comm,
    get_device_id,
    get_instance_index,
    get_local_instance_index,
    get_num_instances,
    get_num_ipus_per_replica,
    get_num_local_replicas,
    get_num_total_replicas,
    get_replica_index_offset,
    getDeviceId,
    getInstanceIndex,
    getLocalInstanceIndex,
    getNumInstances,
    getNumIpusPerReplica,
    getNumLocalReplicas,
    getNumTotalReplicas,
    getReplicaIndexOffset,
    init,
    initializeBackend,
    is_popdist_env_set,
    isPopdistEnvSet,
    reportProgress,
)
from poprun_py.comm import Communicator, LoopbackComm  # noqa: E402
from poprun_py.progress import report_progress  # noqa: E402

__all__ = [
    "Communicator", "LoopbackComm", "check_num_ipus_per_replica", "checkNumIpusPerReplica",
    "execute_on_instances", "finalize", "finalizeBackend", "get_comm", "get_device_id",
    "get_instance_index", "get_local_instance_index", "get_num_instances", "get_num_ipus_per_replica",
    "get_num_local_replicas", "get_num_total_replicas", "get_replica_index_offset", "getDeviceId",
    "getInstanceIndex", "getLocalInstanceIndex", "getNumInstances", "getNumIpusPerReplica",
    "getNumLocalReplicas", "getNumTotalReplicas", "getReplicaIndexOffset", "init", "initializeBackend",
    "is_popdist_env_set", "isPopdistEnvSet", "report_progress", "reportProgress",
]
