import numpy as np
import pytest

import poprun_py as popdist
from poprun_py import api
from poprun_py.comm import LoopbackComm


@pytest.fixture
def fresh(monkeypatch):
    with api._reset_for_tests():
        yield monkeypatch


def test_outside_a_launcher(fresh):
    assert popdist.isPopdistEnvSet() is False
    assert (popdist.getNumInstances(), popdist.getInstanceIndex(), popdist.getNumTotalReplicas(),
            popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica()) == (
        1, 0, 1, 1, 0, 1)
    assert isinstance(popdist.get_comm(), LoopbackComm)


def test_reads_the_contract(fresh):
    for k, v in {"POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "8",
                 "POPDIST_REPLICA_INDEX_OFFSET": "0", "POPDIST_NUM_IPUS_PER_REPLICA": "2",
                 "POPRUN_DEVICE_ID": "30"}.items():
        fresh.setenv(k, v)
    assert popdist.is_popdist_env_set()
    assert popdist.get_num_local_replicas() == 8
    assert popdist.getDeviceId() == 30
    assert popdist.checkNumIpusPerReplica(2) and not popdist.checkNumIpusPerReplica(4)
    with pytest.raises(ValueError, match="--ipus-per-replica 4"):
        popdist.getDeviceId(4)


def test_camel_case_names_are_the_snake_case_functions():
    pairs = [("isPopdistEnvSet", "is_popdist_env_set"), ("getNumInstances", "get_num_instances"),
             ("getInstanceIndex", "get_instance_index"), ("getNumTotalReplicas", "get_num_total_replicas"),
             ("getNumLocalReplicas", "get_num_local_replicas"), ("getReplicaIndexOffset", "get_replica_index_offset"),
             ("getNumIpusPerReplica", "get_num_ipus_per_replica"), ("getDeviceId", "get_device_id")]
    for camel, snake in pairs:
        assert getattr(popdist, camel) is getattr(popdist, snake)


def test_execute_on_instances_single(fresh):
    assert popdist.execute_on_instances({0}, lambda a, b=1: a + b, 2, b=3) == 5
    with pytest.raises(ValueError, match=r"instances \[3\] do not exist"):
        popdist.execute_on_instances({3}, print)


def test_loopback_collectives_are_identities():
    c = LoopbackComm()
    a = np.arange(4.0)
    assert c.allreduce(a, op="mean") is a and a.tolist() == [0, 1, 2, 3]
    assert c.allgather(a).shape == (1, 4)
    with pytest.raises(ValueError, match="unknown reduction 'prod'"):
        c.allreduce(a, op="prod")
    with pytest.raises(ValueError, match="C-contiguous"):
        c.allreduce(np.zeros((4, 4))[:, 0])
    with pytest.raises(ValueError, match="root 1 does not exist"):
        c.broadcast(a, root=1)
