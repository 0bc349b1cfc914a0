"""The environment of a training command that a test runs as a subprocess: no inherited launcher
variables, one thread per library, the repository importable."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("POPDIST_", "POPRUN_", "PMI_"))}
    out.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    return out
