"""Elastic restarts (``--min-instances K``): after a failed attempt, go on with the hosts that answer.

Before each restart the launcher asks every host of the job whether it can still run its part:
the pre-flight checks (``poprun_py.preflight``), one host at a time and all hosts at once, each
with a deadline. A host that does not answer (ssh refused or timed out, a name that no longer
resolves) or cannot run the job (the venv or the code gone) is lost. The next attempt runs on the
hosts that answered, in the job's host order, with the same instances per host as before and
the same ``--num-replicas``: each instance drives more replicas. Since a run's results do not
depend on how its replicas are split over instances, a program that resumes from its last
checkpoint then computes bit for bit what the job would have computed without the loss.

:func:`shrink` is pure: it picks the most hosts of those that answer on which the replicas can
still be placed (instances divide the replicas evenly, at least ``--min-instances`` of them) and
raises ``ConfigError`` saying why when none can.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from poprun_py.config import LaunchConfig, validate_config
from poprun_py.errors import ConfigError, plural

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 20.0  # a host that has not answered the checks by then is lost


def shrink(config: LaunchConfig, answering: list[str]) -> LaunchConfig:
    """The job on the hosts of ``answering`` (in the job's host order), with as many of them as the
    replicas allow; the same instances per host and the same replicas, IPUs and system."""
    per_host = config.num_instances // len(config.hosts)
    hosts = [h for h in config.hosts if h in answering]
    floor = config.min_instances or config.num_instances
    reasons = []
    for count in range(len(hosts), 0, -1):
        instances = count * per_host
        if instances < floor:
            reasons.append(f"{plural(count, 'host')} would run {plural(instances, 'instance')}, fewer than "
                           f"--min-instances {floor}")
            break
        if config.num_replicas % instances:
            reasons.append(f"{config.num_replicas} replicas do not divide over {plural(instances, 'instance')}")
            continue
        fields = dataclasses.asdict(config)
        fields.update(hosts=tuple(hosts[:count]), num_instances=instances, num_ilds=None)
        if config.only_output_from_instance is not None and config.only_output_from_instance >= instances:
            fields["only_output_from_instance"] = None
        try:
            return validate_config(**fields)
        except ConfigError as err:
            reasons.append(str(err))
    raise ConfigError(
        f"the {config.num_replicas} replicas cannot be placed on the {plural(len(hosts), 'host')} that "
        f"{'answers' if len(hosts) == 1 else 'answer'}"
        + (f" ({', '.join(hosts)})" if hosts else "") + ": " + "; ".join(reasons or ["no host answers"])
        + "; bring hosts back, or lower --min-instances")


def probe_hosts(config: LaunchConfig, *, mpiexec: str, flavor: str, python: str,
                timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """The hosts of the job that cannot run it now, each with why (empty: every host answers)."""
    from poprun_py.preflight import run_preflight

    lost: dict[str, str] = {}
    lock = threading.Lock()

    def probe(host: str) -> None:
        one = dataclasses.replace(config, hosts=(host,), num_instances=1)
        problems = run_preflight(one, mpiexec=mpiexec, flavor=flavor, python=python, timeout=timeout)
        if problems:
            with lock:
                lost[host] = "; ".join(p.removeprefix(f"host {host}: ") for p in problems)

    threads = [threading.Thread(target=probe, args=(h,), daemon=True) for h in config.hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10.0)
    for host in config.hosts:
        if threads[config.hosts.index(host)].is_alive():
            lost.setdefault(host, f"no answer to the checks within {timeout:g} s")
    logger.info("Hosts after the failure: %d answer, lost: %s", len(config.hosts) - len(lost), lost or "none")
    return {h: lost[h] for h in config.hosts if h in lost}


def describe_loss(lost: dict[str, str]) -> str:
    """``host a lost (why); host b lost (why)``."""
    return "; ".join(f"host {host} lost ({why})" for host, why in lost.items())
