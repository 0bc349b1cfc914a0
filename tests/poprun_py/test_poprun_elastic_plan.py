"""Where an elastic job goes on after losing hosts (``poprun_py.elastic.shrink``): exact values."""

import pytest

from poprun_py.config import validate_config
from poprun_py.elastic import describe_loss, shrink
from poprun_py.errors import ConfigError


def job(hosts: str, instances: int, replicas: int, min_instances: int = 1, **kw):
    return validate_config(program=("true",), hosts=tuple(hosts.split(",")), num_instances=instances,
                           num_replicas=replicas, min_instances=min_instances, max_restarts=1, **kw)


@pytest.mark.parametrize("hosts,instances,replicas,answering,want", [
    ("a,b", 2, 4, "a", ("a",), ),
    ("a,b,c,d", 4, 4, "a,b,d", ("a", "b")),  # 3 instances cannot hold 4 replicas: 2 of the 3 hosts
    ("a,b,c,d", 8, 16, "b,c,d", ("b", "c")),  # 2 instances per host stay 2 per host
    ("a,b,c,d", 4, 8, "d,c,b,a", ("a", "b", "c", "d")),  # the job's host order, not the answer's
])
def test_the_job_goes_on_with_as_many_answering_hosts_as_the_replicas_allow(hosts, instances, replicas,
                                                                            answering, want):
    before = job(hosts, instances, replicas)
    after = shrink(before, answering.split(","))
    per_host = instances // len(hosts.split(","))
    assert after.hosts == want
    assert after.num_instances == per_host * len(want)
    assert after.num_replicas == replicas and after.replicas_per_instance == replicas // after.num_instances
    assert (after.min_instances, after.max_restarts, after.program) == (1, 1, ("true",))


def test_too_few_instances_or_no_host_stops_with_the_reason():
    with pytest.raises(ConfigError, match=r"the 4 replicas cannot be placed on the 1 host that answers \(a\): "
                                          r"1 host would run 1 instance, fewer than --min-instances 2"):
        shrink(job("a,b", 2, 4, min_instances=2), ["a"])
    with pytest.raises(ConfigError, match="cannot be placed on the 0 hosts that answer: no host answers"):
        shrink(job("a,b", 2, 4), [])


def test_an_output_filter_beyond_the_new_instances_is_dropped():
    after = shrink(job("a,b", 2, 4, only_output_from_instance=1), ["a"])
    assert after.only_output_from_instance is None


@pytest.mark.parametrize("kw,message", [
    (dict(min_instances=3), "--min-instances 3 is out of range: give 1 to --num-instances 2"),
    (dict(min_instances=1, max_restarts=0), "--min-instances 1 restarts the job .* add --max-restarts N"),
])
def test_min_instances_is_checked(kw, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(program=("true",), hosts=("a", "b"), num_instances=2, num_replicas=4, **kw)


def test_a_loss_is_described_host_by_host():
    assert describe_loss({"b": "unreachable", "c": "no answer"}) == "host b lost (unreachable); host c lost (no answer)"
