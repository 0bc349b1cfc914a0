import compileall
import logging
import os
import sys
from pathlib import Path

import pytest

PACKAGES = ("poprun_py", "launch", "ipu", "models", "data", "jit")


def pytest_sessionstart(session):
    """The project's modules compiled to bytecode once, before any test (in the controller, not in each
    xdist worker). With ``PYTHONDONTWRITEBYTECODE`` set (some CI images set it) no process writes its
    ``.pyc``, and each of the suite's hundreds of launcher, agent and training processes would compile
    every module it imports from source again: 0.1 s of CPU per training process on an AMD EPYC Zen 3.
    ``compileall`` writes them whatever that variable says; git ignores ``__pycache__``."""
    if sys.dont_write_bytecode and not hasattr(session.config, "workerinput"):
        root = Path(__file__).resolve().parents[1]
        for package in PACKAGES:
            compileall.compile_dir(root / package, quiet=1)


@pytest.fixture(autouse=True)
def _library_logger_levels():
    """Every test starts with the library's own logger levels (NOTSET: the root decides), whatever an
    entry point called earlier in this worker process, even from a module-scoped fixture, left set."""
    from launch.study.cli import QUIET_LOGGERS  # what poprun-study's main quiets for its console

    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.fixture(autouse=True)
def _no_inherited_launch_env(monkeypatch):
    """Tests control the launcher/instance environment themselves."""
    for name in list(os.environ):
        if name.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "PMIX_", "SLURM_", "MPI_LOCAL")):
            monkeypatch.delenv(name, raising=False)
    # the kernels' fixed shape rules, not this machine's measured choices (models/kernels/wisdom.py):
    # tests that compare bits with recorded figures or across processes see the same formulations
    monkeypatch.setenv("POPRUN_WISDOM", "off")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks: ignored without it
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): a worker per CPU this process may use, at most 4. Half of a
    clean run is numba compiling kernels, one core per process, and the workers share the on-disk
    cache; beyond 4 each worker would compile the same kernels at the same time."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole test files to a worker (a file's module fixtures run once, and its kernels
    compile in one process), every Slurm test on one worker (one test cluster). xdist's own
    ``--dist loadgroup`` would do this with marks, but it stopped grouping under pytest 9.2
    (pytest-dev/pytest-xdist#1386). An explicit ``--dist`` other than xdist's default keeps its own."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            return "tests/slurm/" if path.startswith("tests/slurm/") else path

    return ByFile(config, log)
