"""MPI under a real ``srun --mpi=pmi2``: start-up, what once broke it, and failures.

Issue 13 saw every rank abort in ``MPI_Init_thread`` under srun when numba was imported first.
The import order was not the cause: a stale MPICH start-up segment was (see ``slurm_cluster``).
These tests pin both halves: numba before MPI works, and a segment left by an aborted step of the
same job and step ids breaks ``MPI_Init`` until the epilog removes it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.slurm.slurm_cluster import kvs_hash, mpich_segments
from tests.slurm.slurm_jobs import ROOT, job_env, sbatch

ALLREDUCE = ("import numpy as np\nfrom mpi4py import MPI\n"
             "a = np.ones(3)\nMPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, a)\n"
             "print('rank', MPI.COMM_WORLD.Get_rank(), 'sum', a[0], flush=True)\n")

NUMBA_FIRST = "import numba\nnumba.njit(lambda x: x + 1)(1)\n" + ALLREDUCE

# Both ranks start MPI, then crash: nobody finalises, so nobody unlinks the step's segment.
CRASH = """
import os, signal
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
os.kill(os.getpid(), signal.SIGKILL)
"""


def srun(slurm, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["srun", "--time=2", *args], cwd=ROOT, env=job_env(slurm), capture_output=True,
                          text=True, timeout=timeout)


def test_numba_loaded_before_mpi_init_under_srun(slurm):
    proc = srun(slurm, "-n", "2", "--mpi=pmi2", sys.executable, "-c", NUMBA_FIRST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.split("\n")[:2]) == ["rank 0 sum 2.0", "rank 1 sum 2.0"]


def test_a_stale_segment_named_like_a_new_step_breaks_mpi_init_and_the_epilog_removes_it(slurm, tmp_path):
    (tmp_path / "allreduce.py").write_text(ALLREDUCE)
    (tmp_path / "crash.py").write_text(CRASH)
    # Job 1 crashes after MPI_Init; its batch script keeps a copy of the segment this leaves behind,
    # before the epilog removes it.
    keep = tmp_path / "stale"
    (tmp_path / "abort.sh").write_text(f"""#!/bin/bash
srun -n 2 --mpi=pmi2 {sys.executable} crash.py || true
{sys.executable} -c 'import os, shutil, sys; from slurm_cluster import mpich_segments
for p in mpich_segments(int(os.environ["SLURM_JOB_ID"]))[:1]: shutil.copy(p, sys.argv[1])' {keep}
""")
    aborted, code, out = sbatch(slurm, "-n", "2", "--time=2", "abort.sh", cwd=tmp_path,
                                PYTHONPATH=f"{ROOT}:{ROOT / 'tests' / 'slurm'}")
    assert code == 0, out
    if not keep.exists():
        pytest.skip("this MPICH names its start-up segment otherwise: nothing named after the step was left")
    assert mpich_segments(aborted) == [], "the epilog should have removed the aborted step's segment"

    # A later job with other ids starts cleanly; one whose step has the same name as the stale file
    # (as after a restart of the cluster from scratch) dies in MPI_Init.
    reused = slurm.next_job_id()
    shutil.copy(keep, f"/dev/shm/mpich_shm_{kvs_hash(reused, 0)}_0")
    job, code, out = sbatch(slurm, "-n", "2", "--time=2", "--wrap",
                            f"srun -n 2 --mpi=pmi2 --kill-on-bad-exit=1 {sys.executable} allreduce.py", cwd=tmp_path)
    assert job == reused, out
    assert mpich_segments(reused) == []  # the epilog removed the planted segment either way
    if code == 0:
        # The planted segment does not always break MPI_Init: once in about ten runs the step started
        # and finished cleanly over it (cause not established). What protects users is the epilog's
        # removal, asserted above; the breakage itself is shown only when it happens.
        pytest.skip("the stale segment did not break MPI_Init this time (it does in most runs)")
    assert "MPI_Init_thread" in out, out  # "Message truncated" or UCX's "failed to unpack address"


FAIL = """
import os, signal, sys
import poprun_py as popdist
popdist.init()
comm = popdist.get_comm()
if popdist.getInstanceIndex() == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("instance 1 fails on purpose")
    os.kill(os.getpid(), signal.SIGKILL)
comm.barrier()  # instance 0 waits here for instance 1, forever unless the step is brought down
"""


@pytest.mark.parametrize("how", ["raise", "sigkill"])
def test_a_failing_task_brings_the_step_down(slurm, tmp_path, how):
    script = tmp_path / "fail.py"
    script.write_text(FAIL)
    proc = srun(slurm, "-n", "2", "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable, "-m", "poprun_py",
                "python", str(script), how, timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    if how == "raise":
        assert "Traceback" in out and "RuntimeError: instance 1 fails on purpose" in out, out
    else:
        assert "task 1: Killed" in out, out
