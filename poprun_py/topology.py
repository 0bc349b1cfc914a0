"""Where each instance runs and which replicas and IPUs it drives: pure functions."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from poprun_py.errors import ConfigError

if TYPE_CHECKING:
    from poprun_py.config import LaunchConfig


class InstanceInfo(NamedTuple):
    """The placement of one instance of a job (an MPI rank): the replicas it drives and where.

    The launcher computes every instance's placement once (:func:`assign_instances`) and hands
    it over through the environment contract (``poprun_py.env``); inside the instance
    ``read_env`` rebuilds this same record, and the loader, the replicas, the engine and the
    device model all read it from there. ``system`` is "" when the environment did not say
    (Graphcore's PopRun sets no system variable). A named tuple, like every record of the
    environment contract: the agent, started once per instance, reads them without importing
    ``dataclasses`` (a third of its start-up).
    """

    index: int
    num_instances: int
    host: str
    local_index: int  # index among the instances on the same host
    num_local_replicas: int
    replica_offset: int  # global index of its first replica
    num_total_replicas: int
    ipus_per_replica: int
    ild: int  # IPU-Link domain
    device_id: int  # id of the multi-IPU device holding all its replicas
    system: str

    @property
    def replicas(self) -> range:
        return range(self.replica_offset, self.replica_offset + self.num_local_replicas)


def device_id(partition_ipus: int, device_ipus: int, first_ipu: int) -> int:
    """The V-IPU device id of the ``device_ipus``-IPU device starting at ``first_ipu``.

    A partition of N IPUs numbers its devices by size: the N single IPUs first (ids 0..N-1),
    then the N/2 pairs, the N/4 quads, ... up to the one N-IPU device. So in a 16-IPU partition
    the quads are 24..27 (Graphcore's tutorial shows instances with 2 replicas x 2 IPUs on 24..27).
    """
    if device_ipus & (device_ipus - 1) or partition_ipus % device_ipus or first_ipu % device_ipus:
        raise ValueError(
            f"no device of {device_ipus} IPUs starts at IPU {first_ipu} in a {partition_ipus}-IPU partition"
        )
    base, size = 0, 1
    while size < device_ipus:
        base += partition_ipus // size
        size *= 2
    return base + first_ipu // device_ipus


def single_instance(num_replicas: int, ipus_per_replica: int = 1, system: str = "") -> InstanceInfo:
    """The placement of a job that is one instance running all ``num_replicas`` replicas (no launcher)."""
    if num_replicas < 1 or ipus_per_replica < 1:
        raise ValueError(f"a job needs at least one replica of at least one IPU, got {num_replicas} x {ipus_per_replica}")
    return InstanceInfo(index=0, num_instances=1, host="", local_index=0, num_local_replicas=num_replicas,
                        replica_offset=0, num_total_replicas=num_replicas, ipus_per_replica=ipus_per_replica,
                        ild=0, device_id=0, system=system)


def assign_instances(config: LaunchConfig) -> list[InstanceInfo]:
    """Split replicas over instances and instances over hosts, in contiguous blocks."""
    per_host = config.num_instances // len(config.hosts)
    local_replicas = config.replicas_per_instance
    ipus_per_ild = config.num_ipus // config.num_ilds
    infos = []
    for index in range(config.num_instances):
        offset = index * local_replicas
        first_ipu = offset * config.ipus_per_replica
        infos.append(
            InstanceInfo(
                index=index,
                num_instances=config.num_instances,
                host=config.hosts[index // per_host],
                local_index=index % per_host,
                num_local_replicas=local_replicas,
                replica_offset=offset,
                num_total_replicas=config.num_replicas,
                ipus_per_replica=config.ipus_per_replica,
                ild=first_ipu // ipus_per_ild,
                device_id=device_id(config.num_ipus, local_replicas * config.ipus_per_replica, first_ipu),
                system=config.system,
            )
        )
    return infos


_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<body>[0-9,\-]+)\](?P<suffix>[^\[\]]*)$")


def expand_hosts(spec: str) -> list[str]:
    """Expand ``host0,host1`` and Slurm-style ``node[0-2,7]`` lists into host names."""
    hosts: list[str] = []
    for part in re.split(r",(?![^\[]*\])", spec):
        part = part.strip()
        if not part:
            continue
        match = _RANGE.match(part)
        if match is None:
            if "[" in part or "]" in part:
                raise ConfigError(f"cannot read host range {part!r}: write it like node[0-3,7]")
            hosts.append(part)
            continue
        for item in match["body"].split(","):
            lo, _, hi = item.partition("-")
            if not lo or (item.endswith("-")):
                raise ConfigError(f"cannot read host range {part!r}: write it like node[0-3,7]")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{match['prefix']}{n:0{width}d}{match['suffix']}")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"host list {spec!r} names a host twice: give each host once")
    return hosts


def parse_hostfile(text: str, path: str) -> list[str]:
    """Hosts from a hostfile: one per line; ``#`` comments and ``slots=`` suffixes are ignored."""
    hosts = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            hosts.append(line.split()[0].split(":")[0])
    if not hosts:
        raise ConfigError(f"hostfile {path} lists no hosts: write one host name per line")
    return expand_hosts(",".join(hosts))


def format_topology(infos: list[InstanceInfo]) -> str:
    """The ``--print-topology`` table: hosts, ILDs, instances and replicas, column per instance."""
    cols = [
        ("hosts", [i.host for i in infos]),
        ("ILDs", [str(i.ild) for i in infos]),
        ("instances", [str(i.index) for i in infos]),
        ("replicas", [" ".join(str(r) for r in i.replicas) for i in infos]),
    ]
    width = max(len(v) for _, vals in cols for v in vals)
    label_w = max(len(name) for name, _ in cols)
    rows = [f"| {name:<{label_w}} | " + " | ".join(v.center(width) for v in vals) + " |" for name, vals in cols]
    rule = "|" + "-" * (len(rows[0]) - 2) + "|"
    title = "poprun_py topology"
    head = "|" + title.center(len(rows[0]) - 2) + "|"
    edge = " " + "=" * (len(rows[0]) - 2)
    return "\n".join([edge, head, rule, *sum(([r, rule] for r in rows[:-1]), []), rows[-1], edge])
