"""The generated code of every hot kernel, for Intel and AMD CPUs of both vector widths, compiled
here without running it: no gather or scatter, and register blocks that stay in registers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from models import codegen

pytestmark = pytest.mark.skipif(os.environ.get("POPRUN_JIT", "1") == "0", reason="needs numba (POPRUN_JIT=0)")


CONFIGS = [(cpu, "auto") for cpu in codegen.TARGETS] + [("skylake-avx512", "256")]  # and loops held to ymm


@pytest.mark.timeout(1200)  # eight compilations in child processes (about 50 s each, 25 s for AVX2): minutes
def test_every_kernel_is_sound_on_every_target():
    with ThreadPoolExecutor(max_workers=2) as pool:  # one child process per CPU, two at a time
        found = dict(zip(CONFIGS, pool.map(lambda c: codegen.findings_for(c[0], vector_width=c[1]), CONFIGS)))
    faults = [f"{cpu}: {f.kernel}: {'; '.join(f.faults())}" for cpu, rows in found.items() for f in rows if f.faults()]
    assert not faults, "\n".join(faults)
    for (cpu, width), rows in found.items():  # the register blocks really are vectorised: a whole block's FMAs per step
        lanes = 16 if "+avx512f" in codegen.TARGETS[cpu] else 8  # float32 lanes (blocks are zmm even at 256)
        blocked = [f for f in rows if f.blocked]
        assert len(blocked) == 10, (cpu, blocked)
        assert len(rows) == (10 if cpu in codegen.NO_GATHER else len(codegen.catalogue())), cpu
        for f in blocked:
            r, c = map(int, f.kernel.split()[-1].split("x"))  # "name RxC"
            per_step = r * -(-c // lanes)
            assert f.fmas >= per_step and f.fmas % per_step == 0, (cpu, f)


def _asm_for(cpu: str, source: str) -> str:
    """The assembly of ``kernel`` defined by ``source`` (with ``SIG``), compiled for ``cpu``."""
    code = source + "\nkernel.compile(SIG)\nprint(kernel.inspect_asm(SIG))\n"
    with tempfile.TemporaryDirectory() as folder:  # a file of its own: numba caches only functions with one
        script = os.path.join(folder, "probe.py")
        with open(script, "w") as f:
            f.write(code)
        env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=codegen.TARGETS[cpu], NUMBA_CACHE_DIR=folder,
                   PYTHONPATH=os.pathsep.join(sys.path))
        done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


ARRAY_BLOCK = textwrap.dedent("""
    import numpy as np
    from numba import types
    from jit import prange
    from models.kernels.threads import CONTRACT, compiled_kernel

    @compiled_kernel(parallel=True, fastmath=CONTRACT, min_elems=0)
    def kernel(a, w, y, chunks):  # the pointwise matmul as it was once written: its block a numpy array
        m_, k_ = a.shape
        n_ = w.shape[1]
        tiles = m_ // 6
        for p in prange(chunks):
            acc = np.empty((6, 16), y.dtype)
            for r in range(p * tiles // chunks * 6, (p + 1) * tiles // chunks * 6, 6):
                for b in range(0, n_, 16):
                    acc[:] = 0
                    for c in range(k_):
                        cu = np.uint64(c)
                        for t in range(6):
                            xv = a[r + t, cu]
                            for v in range(16):
                                acc[t, v] += xv * w[cu, b + v]
                    for t in range(6):
                        for v in range(16):
                            y[r + t, b + v] = acc[t, v]

    kernel = kernel.compiled
    SIG = (types.float32[:, ::1], types.float32[:, ::1], types.float32[:, ::1], types.int64)
""")


def test_the_check_catches_a_register_block_put_back_in_memory():
    """The array-accumulator matmul: AVX-512's vectoriser gathers and scatters its accumulators."""
    found = codegen.scan("array block", _asm_for("skylake-avx512", ARRAY_BLOCK), blocked=True)
    assert found.gathers > 0 and found.scatters > 0
    assert any("gathers" in fault for fault in found.faults())


def test_the_check_catches_a_block_too_big_for_the_registers():
    """A 24 x 16 block (48 ymm accumulators) on AVX2's 16 registers spills in its hot loop."""
    source = textwrap.dedent("""
        from numba import types
        from models.kernels import pointwise as P
        kernel = P._make_matmul(16, 24).compiled
        SIG = (types.float32[:, ::1], types.float32[:, ::1], types.float32[:, ::1], types.int64, types.int64)
    """)
    found = codegen.scan("24x16 on haswell", _asm_for("haswell", source), blocked=True)
    assert found.spills > 0 and any("stack" in fault for fault in found.faults())


def test_the_hot_loop_is_the_innermost_loop_with_the_most_fmas():
    asm = textwrap.dedent("""\
        .LBB0_1:
        \tvaddps\t%ymm0, %ymm1, %ymm1
        .LBB0_2:
        \tvfmadd231ps\t(%rax){1to16}, %zmm6, %zmm0
        \tvfmadd231ps\t(%rbx){1to16}, %zmm6, %zmm1
        \tvmovups\t%zmm2, 64(%rsp)
        \tjne\t.LBB0_2
        \tjne\t.LBB0_1
        """)
    body = codegen.hot_loop(asm)
    assert body[0] == ".LBB0_2:" and len(body) == 5
    found = codegen.scan("toy", asm, blocked=True)
    assert (found.fmas, found.stores, found.spills) == (2, 1, 1)
