import pytest

from poprun_py.config import validate_config
from poprun_py.errors import ConfigError
from poprun_py.systems import get_system, smallest_system_for


def cfg(**kw):
    return validate_config(program=("true",), **kw)


def test_defaults_resolve_system_and_ilds():
    c = cfg(num_instances=2, num_replicas=4)
    assert (c.system, c.num_ilds, c.num_ipus, c.replicas_per_instance) == ("POD4", 1, 4, 2)
    assert cfg(num_replicas=16).system == "POD16"
    big = cfg(num_instances=2, num_replicas=32, ipus_per_replica=4)
    assert (big.system, big.num_ilds) == ("POD128", 2)
    assert cfg(num_replicas=256, num_instances=16).num_ilds == 4


@pytest.mark.parametrize("kw,message", [
    (dict(num_instances=3, num_replicas=4), "--num-replicas 4 is not divisible by --num-instances 3"),
    (dict(num_instances=3, num_replicas=3), "3 x 1 = 3 IPUs, which is not a power of two: .* --num-replicas 2"),
    (dict(num_replicas=6, ipus_per_replica=2), "6 x 2 = 12 IPUs, which is not a power of two"),
    (dict(num_instances=3, num_replicas=6, hosts=("a", "b")), "--num-instances 3 is not divisible by the 2 hosts"),
    (dict(num_replicas=32, system="POD16"), "needs 32 IPUs but --system POD16 has 16: use --system POD64"),
    (dict(num_replicas=512), "largest simulated system, POD256, has 256"),
    (dict(num_replicas=16, num_ilds=2), "--num-ilds 2 but POD16 has 1 IPU-Link domain"),
    (dict(num_instances=3, num_replicas=128, system="POD128"), "not divisible by --num-instances 3"),
    (dict(num_instances=2, num_replicas=128, num_ilds=1, system="POD128"), "cannot be split evenly over 1"),
    (dict(num_instances=6, num_replicas=96), "not a power of two"),
    (dict(num_instances=0), "--num-instances must be at least 1"),
    (dict(system="POD3"), "unknown system 'POD3': choose one of POD4, POD16"),
    (dict(only_output_from_instance=2, num_instances=2, num_replicas=2), "out of range: instances are 0..1"),
    (dict(process_placement="pack"), "--process-placement 'pack'"),
    (dict(output_tag="[{rank}]"), "--output-tag .* use fields {instance}"),
    (dict(hang_timeout=0.0), "--hang-timeout must be > 0"),
    (dict(max_restarts=-1), "--max-restarts must be >= 0"),
])
def test_invalid_configs_name_the_option_and_the_fix(kw, message):
    with pytest.raises(ConfigError, match=message):
        cfg(**kw)


def test_no_program():
    with pytest.raises(ConfigError, match="no program given"):
        validate_config(program=())


def test_ilds_need_equal_instances():
    c = cfg(num_instances=4, num_replicas=128, num_ilds=2, system="POD128")
    assert c.num_ilds == 2


def test_systems_table():
    assert get_system("pod64").max_hosts == 4
    assert smallest_system_for(5).name == "POD16"
    assert smallest_system_for(65).name == "POD128"
