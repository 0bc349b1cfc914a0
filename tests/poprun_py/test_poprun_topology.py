import pytest

from poprun_py.config import validate_config
from poprun_py.errors import ConfigError
from poprun_py.topology import (
    InstanceInfo,
    assign_instances,
    device_id,
    expand_hosts,
    format_topology,
    parse_hostfile,
)


def cfg(**kw):
    return validate_config(program=("true",), **kw)


def test_four_instances_two_ipus_per_replica_matches_graphcore_tutorial():
    # Graphcore's tutorial: 8 replicas, 4 instances, 2 IPUs/replica -> offsets 0,2,4,6, devices 24..27
    infos = assign_instances(cfg(num_instances=4, num_replicas=8, ipus_per_replica=2))
    assert [(i.replica_offset, i.num_local_replicas, i.device_id) for i in infos] == [
        (0, 2, 24), (2, 2, 25), (4, 2, 26), (6, 2, 27)]
    assert infos[1] == InstanceInfo(index=1, num_instances=4, host="localhost", local_index=1,
                                    num_local_replicas=2, replica_offset=2, num_total_replicas=8,
                                    ipus_per_replica=2, ild=0, device_id=25, system="POD16")


def test_hosts_get_contiguous_blocks_and_local_indices():
    infos = assign_instances(cfg(num_instances=4, num_replicas=8, hosts=("a", "b")))
    assert [(i.host, i.local_index, list(i.replicas)) for i in infos] == [
        ("a", 0, [0, 1]), ("a", 1, [2, 3]), ("b", 0, [4, 5]), ("b", 1, [6, 7])]


def test_pod128_splits_instances_over_two_ilds():
    infos = assign_instances(cfg(num_instances=8, num_replicas=32, ipus_per_replica=4, system="POD128"))
    assert [i.ild for i in infos] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert infos[0].system == "POD128"


@pytest.mark.parametrize("partition,size,first,expected", [
    (16, 1, 5, 5), (16, 2, 0, 16), (16, 2, 14, 23), (16, 4, 12, 27), (16, 8, 8, 29), (16, 16, 0, 30),
    (4, 4, 0, 6), (1, 1, 0, 0),
])
def test_device_ids(partition, size, first, expected):
    assert device_id(partition, size, first) == expected


def test_device_id_rejects_misaligned_device():
    with pytest.raises(ValueError, match="no device of 4 IPUs starts at IPU 2"):
        device_id(16, 4, 2)


def test_expand_hosts():
    assert expand_hosts("node[0-2,7],login") == ["node0", "node1", "node2", "node7", "login"]
    assert expand_hosts("gc[01-03]") == ["gc01", "gc02", "gc03"]
    assert expand_hosts("a,b") == ["a", "b"]


@pytest.mark.parametrize("spec,msg", [("node[1-", "cannot read host range"), ("a,a", "names a host twice")])
def test_expand_hosts_errors(spec, msg):
    with pytest.raises(ConfigError, match=msg):
        expand_hosts(spec)


def test_parse_hostfile_ignores_comments_and_slots():
    text = "# hosts\nhostA slots=4\n\nhostB:2\n"
    assert parse_hostfile(text, "hf") == ["hostA", "hostB"]
    with pytest.raises(ConfigError, match="hostfile empty.txt lists no hosts"):
        parse_hostfile("# nothing\n", "empty.txt")


def test_format_topology_table():
    table = format_topology(assign_instances(cfg(num_instances=2, num_replicas=4)))
    assert table.splitlines() == [
        " ===================================",
        "|         poprun_py topology        |",
        "|-----------------------------------|",
        "| hosts     | localhost | localhost |",
        "|-----------------------------------|",
        "| ILDs      |     0     |     0     |",
        "|-----------------------------------|",
        "| instances |     0     |     1     |",
        "|-----------------------------------|",
        "| replicas  |    0 1    |    2 3    |",
        " ===================================",
    ]
