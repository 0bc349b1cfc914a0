"""The configuration meets the launcher: its replicas, IPUs per replica and system win or must agree.

    cfg = distribute(load_config("default"), dist := popdist.init())  # the launcher's replicas and system, checked
    where = placement(cfg, dist)  # this instance's replicas (poprun_py's InstanceInfo)
"""

from __future__ import annotations

import logging
from dataclasses import replace

from launch.train.config import TrainConfig
from poprun_py.topology import InstanceInfo, single_instance

logger = logging.getLogger(__name__)
# a log record every instance would give alike: instance 0 alone says it (launch.train.cli's logging)
SAID_ONCE = {"said_once": True}


def distribute(cfg: TrainConfig, dist, pinned: frozenset[str] = frozenset()) -> TrainConfig:
    """Check the config against the launcher's placement (a ``poprun_py`` ``DistInfo``).

    Under the launcher its ``--num-replicas``, ``--ipus-per-replica`` and ``--system`` are the
    hardware. The replica count is the launcher's: the config's ``data.replicas`` gives way (with a
    warning naming the global batch), unless ``pinned`` (the keys given on the command line,
    :func:`launch.train.config_file.override_keys`) holds ``data.replicas``; then the two must agree, since the global batch
    (and with ``lr_exponent`` the learning rate) depends on them. An empty ``ipu.system`` takes the
    launcher's. Alone, one instance runs all ``data.replicas`` replicas (:func:`placement`).
    """
    if not dist.is_set:
        return cfg
    if dist.num_total_replicas != cfg.data.replicas and "data.replicas" in pinned:
        raise ValueError(
            f"the launcher runs {dist.num_total_replicas} replicas but --set data.replicas="
            f"{cfg.data.replicas} asks for {cfg.data.replicas}; launch with --num-replicas {cfg.data.replicas} "
            f"or leave data.replicas out (the launcher's count is used)")
    if dist.num_total_replicas != cfg.data.replicas:
        data = replace(cfg.data, replicas=dist.num_total_replicas)
        logger.warning("The launcher runs %d replicas; the configuration's data.replicas=%d gives way: global batch "
                       "%d instead of %d (launch with --num-replicas %d for the configuration's batch).",
                       dist.num_total_replicas, cfg.data.replicas, cfg.data.micro_batch * cfg.data.grad_accum
                       * data.replicas, cfg.global_batch, cfg.data.replicas, extra=SAID_ONCE)
        cfg = replace(cfg, data=data)
    if dist.ipus_per_replica != cfg.ipu.ipus_per_replica:
        raise ValueError(
            f"the launcher gives {dist.ipus_per_replica} IPUs per replica but the config has "
            f"ipu.ipus_per_replica={cfg.ipu.ipus_per_replica}; launch with --ipus-per-replica "
            f"{cfg.ipu.ipus_per_replica} or pass --set ipu.ipus_per_replica={dist.ipus_per_replica}")
    system = cfg.ipu.system
    if dist.system and system and dist.system.upper() != system.upper():
        raise ValueError(
            f"the launcher runs on {dist.system} but the config has ipu.system={system}; launch with "
            f"--system {system.upper()} or pass --set ipu.system={dist.system} (or --set ipu.system='' to take "
            "the launcher's)")
    return replace(cfg, ipu=replace(cfg.ipu, system=system or dist.system))


def placement(cfg: TrainConfig, dist) -> InstanceInfo:
    """This instance's placement: the launcher's (under ``poprun_py``), else one instance that
    runs all ``data.replicas`` replicas. Call it on the result of :func:`distribute`."""
    if dist.is_set:
        return dist.placement
    return single_instance(cfg.data.replicas, cfg.ipu.ipus_per_replica, cfg.ipu.system)
