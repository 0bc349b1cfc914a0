"""``POPRUN_VECTOR_WIDTH``: the vector width numba's loops are compiled for (``jit/__init__.py``).

The default (``auto``) is 512 bits on AVX-512 CPUs, where LLVM's own tuning would prefer 256. This
machine may have no AVX-512, so the AVX-512 cases are compiled for a named AVX-512 CPU (numba's
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) and checked in the assembly, never run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jit import _vector_features

ROOT = Path(__file__).resolve().parents[2]
AVX512 = "+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx2,+avx,+fma,+f16c,+sse4.2"
PROBE = """
import re, numpy as np, numba
from jit import jit

@jit(fastmath={"contract"})
def axpy(a, x, y):
    for i in range(x.size):
        y[i] += a * x[i]

x = np.ones(64, np.float32)
axpy.compile((numba.typeof(np.float32(1)), numba.typeof(x), numba.typeof(x)))
print(len(re.findall("zmm", axpy.inspect_asm(axpy.signatures[0]))))
"""


def _zmm_registers(tmp_path, **env) -> int:
    """zmm registers named in the assembly of a float32 loop compiled for Skylake-SP (not run)."""
    env = {k: v for k, v in os.environ.items() if k != "POPRUN_VECTOR_WIDTH"} | env
    env |= {"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": AVX512, "NUMBA_CACHE_DIR": str(tmp_path),
            "PYTHONPATH": str(ROOT)}
    tmp_path.mkdir()
    probe = tmp_path / "probe.py"  # (numba caches only what a file defines)
    probe.write_text(PROBE)
    out = subprocess.run([sys.executable, str(probe)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_auto_is_512_bit_vectors_on_avx512_and_256_holds_the_loops_to_ymm(tmp_path):
    assert _zmm_registers(tmp_path / "auto") > 0  # LLVM alone would prefer 256 bits on this CPU
    assert _zmm_registers(tmp_path / "512", POPRUN_VECTOR_WIDTH="512") > 0
    assert _zmm_registers(tmp_path / "256", POPRUN_VECTOR_WIDTH="256") == 0


def test_the_width_becomes_numbas_target_features_and_bad_values_name_the_fix():
    assert _vector_features("auto", AVX512) is None and _vector_features("", AVX512) is None
    assert _vector_features("512", AVX512) == AVX512 + ",-prefer-256-bit"
    assert _vector_features(" 256 ", "+avx2") == "+avx2,+prefer-256-bit"
    with pytest.raises(ValueError, match="POPRUN_VECTOR_WIDTH=512, but .* no AVX-512F.*unset it or set it to 256"):
        _vector_features("512", "+avx2,-avx512f")
    with pytest.raises(ValueError, match="POPRUN_VECTOR_WIDTH='1024': use auto .*, 256 or 512"):
        _vector_features("1024", AVX512)
