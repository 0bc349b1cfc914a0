"""What the launcher tells every agent, and where each attempt's instance logs go."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, NamedTuple

from poprun_py.topology import InstanceInfo

if TYPE_CHECKING:
    from poprun_py.config import LaunchConfig


class AgentSpec(NamedTuple):
    """What the launcher tells every agent (sent as JSON on the agent's command line).

    ``instances`` is the job's placement, computed once by the launcher (``assign_instances``):
    the agent of MPI rank ``r`` becomes ``instances[r]`` and hands it to its program through the
    environment contract (``poprun_py.env.instance_env``). The rest is the part of the launch
    config an agent acts on (``for_job``), so that an agent starts without the config's module.
    """

    run_id: str
    instances: tuple[InstanceInfo, ...]
    restart_count: int
    log_dir: str | None
    grace_period: float  # seconds between the stop signal and SIGKILL
    hang_timeout: float | None  # the fence's silence limit (poprun_py.fence)
    process_placement: str  # "disabled", or the CPUs are spread (poprun_py.cpu_binding)
    num_hosts: int
    executable_cache_path: str | None

    @classmethod
    def for_job(cls, config: LaunchConfig, run_id: str, instances: tuple[InstanceInfo, ...],
                restart_count: int = 0) -> AgentSpec:
        return cls(run_id, tuple(instances), restart_count, config.log_dir, config.grace_period,
                   config.hang_timeout, config.process_placement, len(config.hosts),
                   config.executable_cache_path)

    def to_json(self) -> str:
        """Compact at any scale: each instance is one row of values under one list of field names."""
        return json.dumps({**self._asdict(), "instance_fields": InstanceInfo._fields,
                           "instances": [list(i) for i in self.instances]})

    @staticmethod
    def from_json(text: str) -> AgentSpec:
        raw = json.loads(text)
        names = raw.pop("instance_fields")
        infos = tuple(InstanceInfo(**dict(zip(names, row))) for row in raw.pop("instances"))
        return AgentSpec(instances=infos, **raw)


def attempt_dir(log_dir: str, restart_count: int, instance: int) -> str:
    return os.path.join(log_dir, f"attempt_{restart_count}", f"instance_{instance}")
