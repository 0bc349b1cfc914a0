"""What the launcher tells every agent, and where each attempt's instance logs go."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass

from poprun_py.config import LaunchConfig
from poprun_py.topology import InstanceInfo


@dataclass(frozen=True)
class AgentSpec:
    """What the launcher tells every agent (sent as JSON on the agent's command line).

    ``instances`` is the job's placement, computed once by the launcher (``assign_instances``):
    the agent of MPI rank ``r`` becomes ``instances[r]`` and hands it to its program through the
    environment contract (``poprun_py.env.instance_env``).
    """

    config: LaunchConfig
    run_id: str
    instances: tuple[InstanceInfo, ...]
    restart_count: int = 0
    log_dir: str | None = None

    def to_json(self) -> str:
        fields_ = [f.name for f in dataclasses.fields(InstanceInfo)]
        return json.dumps(
            {"config": dataclasses.asdict(self.config), "run_id": self.run_id, "restart_count": self.restart_count,
             "log_dir": self.log_dir, "instance_fields": fields_,
             "instances": [[getattr(i, f) for f in fields_] for i in self.instances]}
        )

    @staticmethod
    def from_json(text: str) -> "AgentSpec":
        raw = json.loads(text)
        cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in raw["config"].items()}
        infos = tuple(InstanceInfo(**dict(zip(raw["instance_fields"], row))) for row in raw["instances"])
        return AgentSpec(LaunchConfig(**cfg), raw["run_id"], infos, raw["restart_count"], raw["log_dir"])


def attempt_dir(log_dir: str, restart_count: int, instance: int) -> str:
    return os.path.join(log_dir, f"attempt_{restart_count}", f"instance_{instance}")
