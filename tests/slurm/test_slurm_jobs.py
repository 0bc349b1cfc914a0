"""Every script under ``launch/jobs/`` submitted as written with ``sbatch`` to the one-node cluster.

Only sbatch's own options and the variables a script documents adapt it to this node (one node,
2 CPUs): no edited copies. The Slurm scripts train the small dense run and must give bitwise the
losses and weights of the same run under the launcher (in-MPI mode under ``srun --mpi=pmi2`` for
``slurm_srun.sh``). The G16-B4 recipe scripts train a tiny G16-B4 (32 px, width 0.25, depth 0.1,
micro-batch 1, accumulation 4, one update) on a synthetic dataset with all their replicas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.slurm_jobs import DENSE, ROOT, TWO_TASKS, assert_same_run, sbatch

JOBS_DIR = ROOT / "launch" / "jobs"

TINY_G16 = ["--set", "model.options={resolution: 32, width: 0.25, depth: 0.1}", "--set", "data.micro_batch=1",
            "--set", "data.grad_accum=4", "--set", "run.max_steps=1", "--set", "schedule.warmup_epochs=0",
            "--set", "run.evaluate=false", "--set", "run.progress_bar=false", "--set", "run.plots=false"]

# sbatch options for this node and the script's arguments, per script. Instances: the fewest the
# POD's IPU-Link domains allow (POD16 and POD64 have 1, POD128 2, POD256 4).
JOBS = {
    "slurm_srun.sh": (TWO_TASKS, ["dense", *DENSE]),
    "slurm_launcher_mode.sh": (TWO_TASKS, ["dense", *DENSE]),
    "g16_b4_pod16.sh": (["-N", "1", "-c", "2", "--time=10", "--export=ALL,INSTANCES=1"], TINY_G16),
    "g16_b4_pod64.sh": (["-N", "1", "-c", "2", "--time=10", "--export=ALL,INSTANCES=1"], TINY_G16),
    "g16_b4_pod128.sh": (["-N", "1", "-c", "2", "--time=10", "--export=ALL,INSTANCES=2"], TINY_G16),
    "g16_b4_pod256.sh": (["-N", "1", "-c", "2", "--time=10", "--export=ALL,INSTANCES=4"], TINY_G16),
}


def scripts() -> list:
    return [pytest.param(p.name, marks=[pytest.mark.slow] if p.name.startswith("g16") else [])
            for p in sorted(JOBS_DIR.glob("*.sh"))]


@pytest.fixture(scope="module")
def tiny_imagenet(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "tiny.h5"
    subprocess.run([sys.executable, "-m", "data", "convert", "synthetic", "--train", "600", "--val", "16",
                    "--height", "32", "--width", "32", "--classes", "10", "--no-checksum", str(path)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    return path


@pytest.mark.parametrize("name", scripts())
def test_job_script_runs_as_written(slurm, request, tmp_path, name):
    assert name in JOBS, f"launch/jobs/{name} has no sbatch options in JOBS: add the ones that fit one small node"
    options, args = JOBS[name]
    run_dir = tmp_path / "run"
    args = [*args, "--set", f"run.run_dir={run_dir}"]
    if name.startswith("g16"):
        args += ["--set", f"data.path={request.getfixturevalue('tiny_imagenet')}"]
    job, code, out = sbatch(slurm, *options, str(JOBS_DIR / name), *args, cwd=tmp_path, timeout=400)
    assert code == 0, out[-5000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["updates"] == (1 if name.startswith("g16") else 150)
    if name == "slurm_launcher_mode.sh":  # the allocation's node list, reached through srun
        record = json.loads((tmp_path / "runs" / f"slurm-{job}" / "run.json").read_text())
        assert {i["host"] for i in record["topology"]} == {slurm.host}
        command = record["attempts"][0]["command"]
        assert command[command.index("-launcher") + 1] == "slurm"
    if not name.startswith("g16"):
        assert_same_run(run_dir, request.getfixturevalue("launcher_reference"))


@pytest.mark.parametrize("name", ["slurm_srun.sh", "slurm_launcher_mode.sh"])
def test_a_slurm_script_run_outside_slurm_says_to_submit_it_with_sbatch(name, tmp_path):
    """No cluster needed: run by hand, the script stops at once with the sbatch command, not with bash's
    'SLURM_NTASKS: unbound variable'."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("SLURM_")}
    done = subprocess.run(["bash", str(JOBS_DIR / name), "dense"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"{JOBS_DIR / name}: not inside a Slurm job (SLURM_JOB_ID and SLURM_NTASKS are "
                                  f"unset): submit it with sbatch {JOBS_DIR / name} [config] [training options]")
    assert "unbound variable" not in done.stderr and len(done.stderr.splitlines()) == 1
