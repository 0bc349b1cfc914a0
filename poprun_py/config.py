"""The launch configuration: one frozen record built once from the command line."""

from __future__ import annotations

from dataclasses import dataclass

from poprun_py.errors import ConfigError, plural
from poprun_py.systems import get_system, is_power_of_two, smallest_system_for

PLACEMENTS = ("spreadnuma", "disabled")
DEFAULT_OUTPUT_TAG = "[{instance}] "
TAG_FIELDS = ("instance", "host", "pid", "stream", "local", "replicas", "time")
IPUS_PER_ILD = 64  # one IPU-Link domain is one POD64 rack


@dataclass(frozen=True)
class LaunchConfig:
    """Everything the launcher needs, validated. Build it with ``validate_config``."""

    program: tuple[str, ...]
    num_instances: int = 1
    num_replicas: int = 1
    ipus_per_replica: int = 1
    num_ilds: int = 1
    hosts: tuple[str, ...] = ("localhost",)
    system: str = "POD4"
    mpi_global_args: tuple[str, ...] = ()
    mpi_local_args: tuple[str, ...] = ()
    only_output_from_instance: int | None = None
    print_topology: bool = False
    offline_mode: bool = True
    process_placement: str = "spreadnuma"
    executable_cache_path: str | None = None
    verbose: int = 0
    dry_run: bool = False
    log_dir: str | None = None
    output_tag: str = DEFAULT_OUTPUT_TAG
    grace_period: float = 10.0
    hang_timeout: float | None = None
    max_restarts: int = 0
    min_instances: int | None = None  # elastic: restart on the hosts that answer (poprun_py/elastic.py)
    mpiexec: str | None = None
    preflight: bool = False  # check every host before starting (poprun_py/preflight.py)

    @property
    def num_ipus(self) -> int:
        return self.num_replicas * self.ipus_per_replica

    @property
    def replicas_per_instance(self) -> int:
        return self.num_replicas // self.num_instances


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, got {value}")


def validate_config(
    *,
    program: tuple[str, ...],
    num_instances: int = 1,
    num_replicas: int | None = None,
    ipus_per_replica: int = 1,
    num_ilds: int | None = None,
    hosts: tuple[str, ...] = ("localhost",),
    system: str | None = None,
    **rest,
) -> LaunchConfig:
    """Check the topology options against each other and the simulated system.

    Every failure is a ``ConfigError`` whose message names the option and the fix. Defaults that
    depend on other options (the replicas: one per instance; the system; the number of IPU-Link
    domains) are resolved here.
    """
    if not program:
        raise ConfigError("no program given: usage `poprun_py [options] [--] program [args...]`")
    _check_positive("--num-instances", num_instances)
    if num_replicas is None:
        num_replicas = num_instances  # one per instance
    _check_positive("--num-replicas", num_replicas)
    _check_positive("--ipus-per-replica", ipus_per_replica)
    if num_replicas % num_instances:
        raise ConfigError(
            f"--num-replicas {num_replicas} is not divisible by --num-instances {num_instances}: "
            f"each instance drives the same number of replicas; give --num-replicas a multiple of "
            f"{num_instances}, or --num-instances a divisor of {num_replicas}"
        )
    if not hosts:
        raise ConfigError("the host list is empty: give -H host1,host2 or a --hostfile with one host per line")
    if num_instances % len(hosts):
        raise ConfigError(
            f"--num-instances {num_instances} is not divisible by the {len(hosts)} hosts "
            f"({', '.join(hosts)}): instances are divided evenly among hosts"
        )
    num_ipus = num_replicas * ipus_per_replica
    if not is_power_of_two(num_ipus):
        raise ConfigError(
            f"--num-replicas x --ipus-per-replica = {num_replicas} x {ipus_per_replica} = {num_ipus} IPUs, "
            f"which is not a power of two: IPU partitions come in powers of two (for example "
            f"--num-replicas {max(1, (1 << (num_ipus.bit_length() - 1)) // ipus_per_replica)})"
        )
    shape = get_system(system) if system else smallest_system_for(num_ipus)
    if num_ipus > shape.num_ipus:
        bigger = smallest_system_for(num_ipus)
        raise ConfigError(
            f"the job needs {num_ipus} IPUs but --system {shape.name} has {shape.num_ipus}: "
            f"use --system {bigger.name} or fewer replicas"
        )
    ilds = num_ilds if num_ilds is not None else max(1, -(-num_ipus // IPUS_PER_ILD))
    _check_positive("--num-ilds", ilds)
    if ilds > shape.num_ilds:
        raise ConfigError(
            f"--num-ilds {ilds} but {shape.name} has {plural(shape.num_ilds, 'IPU-Link domain')}: "
            f"use --num-ilds {shape.num_ilds} or a larger --system"
        )
    if num_instances % ilds:
        raise ConfigError(
            f"--num-instances {num_instances} is not divisible by --num-ilds {ilds}: every IPU-Link "
            f"domain needs the same number of instances"
        )
    if num_ipus % ilds or num_ipus // ilds > IPUS_PER_ILD:
        raise ConfigError(
            f"{num_ipus} IPUs cannot be split evenly over {plural(ilds, 'IPU-Link domain')} of at most "
            f"{IPUS_PER_ILD} IPUs: use --num-ilds {max(1, -(-num_ipus // IPUS_PER_ILD))}"
        )
    only = rest.get("only_output_from_instance")
    if only is not None and not 0 <= only < num_instances:
        raise ConfigError(
            f"--only-output-from-instance {only} is out of range: instances are 0..{num_instances - 1}"
        )
    _validate_rest(rest)
    _validate_elastic(rest.get("min_instances"), num_instances, rest.get("max_restarts", 0))
    return LaunchConfig(
        program=tuple(program),
        num_instances=num_instances,
        num_replicas=num_replicas,
        ipus_per_replica=ipus_per_replica,
        num_ilds=ilds,
        hosts=tuple(hosts),
        system=shape.name,
        **rest,
    )


def _validate_rest(rest: dict) -> None:
    placement = rest.get("process_placement", "spreadnuma")
    if placement not in PLACEMENTS:
        raise ConfigError(f"--process-placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
    if rest.get("grace_period", 10.0) < 0:
        raise ConfigError(f"--grace-period must be >= 0 seconds, got {rest['grace_period']}")
    hang = rest.get("hang_timeout")
    if hang is not None and hang <= 0:
        raise ConfigError(f"--hang-timeout must be > 0 seconds, got {hang}; leave it out to disable")
    if rest.get("max_restarts", 0) < 0:
        raise ConfigError(f"--max-restarts must be >= 0, got {rest['max_restarts']}")
    tag = rest.get("output_tag", DEFAULT_OUTPUT_TAG)
    try:
        tag.format(**{f: "" for f in TAG_FIELDS})
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(
            f"--output-tag {tag!r} is not a valid template ({err}); use fields "
            + ", ".join("{" + f + "}" for f in TAG_FIELDS)
        ) from None


def _validate_elastic(min_instances: int | None, num_instances: int, max_restarts: int) -> None:
    if min_instances is None:
        return
    if not 1 <= min_instances <= num_instances:
        raise ConfigError(f"--min-instances {min_instances} is out of range: give 1 to --num-instances "
                          f"{num_instances}")
    if max_restarts < 1:
        raise ConfigError(f"--min-instances {min_instances} restarts the job on the hosts that answer, which "
                          f"needs restarts: add --max-restarts N (N >= 1)")
