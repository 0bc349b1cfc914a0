"""The kernel choices a run computed with, for its record: the machine's kernel wisdom.

On a machine with kernel wisdom (``models.kernels.wisdom``) each product shape goes through the
formulation that machine measured fastest, so two machines, or two hosts with separate wisdom files,
may compute a run's last bits differently. The record names the wisdom file, the machine key, the
choices instance 0 took, and whether every instance took the same ones (one small all-gather of a
digest); a warning says so where they did not.
"""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np

import jit
from models.kernels import wisdom

logger = logging.getLogger(__name__)


def gather_kernel_record(comm) -> dict:
    """{file, machine, choices, instances_agree} (collective: every instance calls it)."""
    choices = {key: entry["choice"] for key, entry in sorted(wisdom.used().items())}
    digest = hashlib.sha256(json.dumps(choices, sort_keys=True).encode()).digest()[:8]
    every = comm.allgather(np.frombuffer(digest, np.uint8).copy())
    agree = bool((every == every[0]).all())
    if not agree:
        logger.warning("The instances computed with different kernel choices (separate kernel-wisdom files on "
                       "hosts of different CPUs or BLAS): the result may differ in its last bits from a run on "
                       "one host. Share one file: set POPRUN_WISDOM to a path on a shared file system.")
    path = jit.wisdom_path()
    return {"file": str(path) if path is not None else None, "machine": wisdom.machine() if path else None,
            "choices": choices, "instances_agree": agree}


__all__ = ["gather_kernel_record"]
