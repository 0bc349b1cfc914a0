import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _no_inherited_launch_env(monkeypatch):
    """Tests control the launcher/instance environment themselves."""
    for name in list(os.environ):
        if name.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "PMIX_", "SLURM_", "MPI_LOCAL")):
            monkeypatch.delenv(name, raising=False)
