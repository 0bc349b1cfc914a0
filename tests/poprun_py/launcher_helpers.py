"""Running the launcher from tests, and checking that nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def launcher_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("POPDIST_", "POPRUN_", "PMI_", "OMPI_", "PMIX_", "SLURM_")) or k == "POPRUN_WISDOM"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def poprun(*args: str, timeout: float = 120, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "poprun_py", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or launcher_env(), cwd=kw.pop("cwd", ROOT), **kw)


def start_poprun(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "poprun_py", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or launcher_env(), cwd=ROOT)


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker`` (zombies excluded)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def assert_no_leftovers(marker: str, timeout: float = 5.0) -> None:
    """Every process of the job must be gone; a dying one gets ``timeout`` seconds to finish."""
    _, alive = psutil.wait_procs(processes_with(marker), timeout=timeout)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        p.kill()
    assert not alive, f"processes left behind: {[(p.pid, p.cmdline()) for p in alive]}"


def write_script(path, body: str) -> str:
    path.write_text(body)
    return str(path)
