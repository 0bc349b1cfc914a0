"""The machine code of the engine's kernels for any x86 CPU, compiled for it without running it.

A kernel's speed depends on what LLVM makes of it for the CPU it compiles for: the same loop can
keep its register block in registers on one CPU and gather and scatter it through memory on
another. This module compiles every hot kernel (``models/kernels``, the group-norm and optimizer
kernels) for a named LLVM CPU, in a child process whose numba targets that CPU
(``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES`` together: the name alone keeps the host's
features), with the argument types the layers pass, and reads the assembly:

- ``gathers``, ``scatters``: vector gather and scatter instructions anywhere (slow on Intel cores);
- for the register-block kernels (:mod:`jit.block`), the hot loop: the innermost loop with the
  most packed FMAs; its ``fmas``, its vector ``stores`` and its vector ``spills`` (vector
  operations on the stack). The accumulators of a sound register block are neither stored nor
  reloaded in that loop.

``python -m models.codegen [--cpu NAME ...]`` prints the table and exits 1 on a finding;
``tests/models/test_kernel_targets.py`` runs it for :data:`TARGETS` (for the AVX2 CPUs that LLVM
never gives a gather, :data:`NO_GATHER`, the register-block kernels alone). Nothing runs the compiled code,
so an AVX2 machine checks AVX-512 targets too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

AVX2 = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+lzcnt,+movbe"
AVX512 = AVX2 + ",+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
TARGETS = {  # LLVM CPU name: the features given with it (the CPU's own; what the kernels size blocks from)
    "haswell": AVX2, "znver1": AVX2, "znver3": AVX2,
    "skylake-avx512": AVX512, "icelake-server": AVX512, "sapphirerapids": AVX512, "znver4": AVX512,
}
# LLVM's x86 cost model emits a gather on AVX2 only for CPUs tuned "fast gather" (Skylake and later;
# X86TTIImpl::isLegalMaskedGather), and a scatter only with AVX-512: for these CPUs a kernel's only
# possible finding is a register block's, so only the register-block kernels are compiled for them.
NO_GATHER = frozenset({"haswell", "znver1", "znver3"})
_GATHER = re.compile(r"^\s*v(p)?gather\w*", re.M)
_SCATTER = re.compile(r"^\s*v(p)?scatter\w*", re.M)
_LABEL = re.compile(r"^(\.LBB\w+):")
_JUMP = re.compile(r"^\s*j\w+\s+(\.LBB\w+)")
_PACKED_FMA = re.compile(r"^\s*vfn?m(add|sub)\w*p[sd]\b")
_VECTOR = re.compile(r"%[xyz]mm\d+")


@dataclass(frozen=True)
class Finding:
    """What the assembly of one kernel shows for one CPU."""

    kernel: str
    blocked: bool  # a register-block kernel: its hot loop is checked
    gathers: int
    scatters: int
    fmas: int  # packed FMAs in the hot loop
    stores: int  # vector stores in the hot loop
    spills: int  # vector operations on the stack in the hot loop

    def faults(self) -> list[str]:
        out = [f"{n} {what}" for n, what in ((self.gathers, "gathers"), (self.scatters, "scatters")) if n]
        if self.blocked:
            if not self.fmas:
                out.append("no packed FMA in the innermost loops")
            out += [f"{n} {what} in the hot loop" for n, what in
                    ((self.stores, "vector stores"), (self.spills, "vector stack accesses")) if n]
        return out


def hot_loop(asm: str) -> list[str]:
    """The lines of the innermost loop (a label and the last backward jump to it, with no other
    loop inside) holding the most packed FMAs; [] when no loop has any."""
    lines = asm.splitlines()
    labels, loops = {}, []
    for i, line in enumerate(lines):
        if m := _LABEL.match(line):
            labels[m.group(1)] = i
        elif (m := _JUMP.match(line)) and m.group(1) in labels:
            loops.append((labels[m.group(1)], i))
    innermost = [(a, b) for a, b in loops if not any(a < c and d <= b and (c, d) != (a, b) for c, d in loops)]
    best = max(innermost, key=lambda ab: sum(bool(_PACKED_FMA.match(x)) for x in lines[ab[0]:ab[1]]), default=None)
    body = lines[best[0]:best[1] + 1] if best else []
    return body if any(_PACKED_FMA.match(x) for x in body) else []


def scan(kernel: str, asm: str, blocked: bool) -> Finding:
    """The counts of :class:`Finding` from one kernel's assembly (AT&T syntax)."""
    body = hot_loop(asm)

    def is_vector_store(line: str) -> bool:  # AT&T: the destination, last, is memory
        return bool(_VECTOR.search(line)) and line.split("#")[0].rstrip().endswith(")")

    return Finding(kernel, blocked, len(_GATHER.findall(asm)), len(_SCATTER.findall(asm)),
                   sum(bool(_PACKED_FMA.match(x)) for x in body), sum(is_vector_store(x) for x in body),
                   sum(bool(_VECTOR.search(x)) and "(%rsp)" in x for x in body))


def catalogue():
    """(name, dispatcher, signature, blocked) for every hot kernel, built for the CPU numba targets
    (the register blocks sized for it, as the layers would), with the argument types the layers
    pass (float32; the gradient checks' float64 is not a speed path)."""
    from numba import types

    from models.kernels import conv as C
    from models.kernels import direct_conv as D
    from models.kernels import group_norm as G
    from models.kernels import norm as N
    from models.kernels import pointwise as P
    from models.kernels import small_map as S
    from models.optim import _kernels as O

    f32, f64, i64, b1 = types.float32, types.float64, types.int64, types.boolean

    def arr(dtype, ndim, layout="C"):
        return types.Array(dtype, ndim, layout)

    def compiled(kernel):
        return getattr(kernel, "compiled", kernel)

    a2, a1 = arr(f32, 2), arr(f32, 1)
    out = []
    for vec in (16, 8):
        out.append((f"pointwise.matmul {P.tiles()[vec][0]}x{vec}", compiled(P._make_matmul(vec, P.tiles()[vec][0])),
                    (a2, a2, a2, i64, i64), True))
        tile = P.tiles()[vec][0]
        out.append((f"pointwise.weight_grad {tile}x{vec}", compiled(P._make_weight_grad(vec, tile)),
                    (a2, a2, arr(f32, 3)), True))
        for tile in sorted(D.tile_table()[vec])[-1:]:  # the widest tile: the most accumulators
            out.append((f"direct_conv.conv {tile}x{vec}", compiled(D._make_conv(vec, tile)),
                        (arr(f32, 5), arr(f32, 4), arr(f32, 5), i64, i64, i64, i64, arr(f32, 5), arr(f32, 5, "A"),
                         i64, i64, i64, i64, i64, i64), True))
        cb = D.tap_block(vec, 48)
        out.append((f"direct_conv.weight_grad {cb}x{vec}", compiled(D._make_weight_grad(vec, cb)),
                    (arr(f32, 5), arr(f32, 5), arr(f32, 5), i64, i64, i64, i64, arr(f32, 4), arr(f32, 4, "A")), True))
        out.append((f"small_map.group_weight_grad {D.channel_block(vec)}x{vec}",
                    compiled(S._make_group_weight_grad(vec, D.channel_block(vec))),
                    (arr(f32, 5), arr(f32, 5), arr(f32, 5), i64, i64, i64, i64, i64), True))
    a4, a3 = arr(f32, 4), arr(f32, 3)
    out += [
        ("conv.dw_forward", compiled(C.dw_forward), (a4, a3, a4, i64, i64, i64, i64), False),
        ("conv.dw_backward_input", compiled(C.dw_backward_input), (a4, a3, a4, i64, i64, i64, i64), False),
        ("conv.dw_backward_weight", compiled(C.dw_backward_weight), (a4, a4, a4, i64, i64, i64, i64), False),
        ("conv.im2col", compiled(C.im2col), (a4, a3) + (i64,) * 10, False),
        ("conv.col2im", compiled(C.col2im), (a3, a4) + (i64,) * 10, False),
        ("group_norm.group_stats", compiled(G.group_stats), (a3, a1, f64, a2, a2, a2, arr(f64, 2)), False),
        ("group_norm.group_affine_act", compiled(G.group_affine_act), (a3, a2, a2, a2, a1, a3, a3, i64, b1), False),
        ("group_norm.group_norm_backward", compiled(G.group_norm_backward),
         (a3, a3, a3, a2, a2, a2, a1, arr(f64, 2), a1, a3, arr(f64, 2), arr(f64, 2), i64), False),
        ("norm.column_moments", compiled(N.column_moments), (a2, arr(f64, 1), arr(f64, 1), arr(f64, 1), i64), False),
        ("norm.affine_act", compiled(N.affine_act), (a2, a1, a1, a1, a1, a2, a2, i64, b1), False),
        ("norm.norm_backward_reduce", compiled(N.norm_backward_reduce),
         (a2, a2, a2, a1, a1, a1, a1, arr(f64, 1), a2, arr(f64, 1), arr(f64, 1), i64, b1, i64), False),
        ("norm.norm_backward_apply", compiled(N.norm_backward_apply), (a2, a1, a1, a1, a1, a1, a2), False),
        ("optim.momentum_apply", compiled(O.momentum_apply),
         (types.ListType(a1), types.ListType(a1), types.ListType(a1), a1, arr(b1, 1), a1, b1), False),
        ("optim.lars_rates", compiled(O.lars_rates), (arr(f64, 2), arr(b1, 1), f64, f64, f64, f64, a1), False),
        ("optim.sum_squares", compiled(O.sum_squares), (a1,), False),
        ("optim.scale_all_finite", compiled(O.scale_all_finite), (a1, f32), False),
    ]
    return out


def findings_here(blocked_only: bool = False) -> list[Finding]:
    """Compile the catalogue (or its register-block kernels) for the CPU this process's numba
    targets and scan each kernel."""
    result = []
    for name, dispatcher, sig, blocked in catalogue():
        if blocked_only and not blocked:
            continue
        dispatcher.compile(sig)
        result.append(scan(name, dispatcher.inspect_asm(sig), blocked))
    return result


def findings_for(cpu: str, features: str | None = None, vector_width: str = "auto") -> list[Finding]:
    """:func:`findings_here` in a child process that targets ``cpu`` (with ``features``, default
    :data:`TARGETS`'s), its numba cache in a temporary folder; the register-block kernels alone for
    a CPU of :data:`NO_GATHER` with its own features."""
    blocked_only = cpu in NO_GATHER and features is None
    features = features if features is not None else TARGETS[cpu]
    with tempfile.TemporaryDirectory(prefix="poprun-codegen-") as cache:
        env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=cache,
                   POPRUN_VECTOR_WIDTH=vector_width, POPRUN_JIT="1")
        here = ["--here", "--blocked-only"] if blocked_only else ["--here"]
        done = subprocess.run([sys.executable, "-m", "models.codegen", *here], env=env,
                              capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the kernels for {cpu} failed:\n{done.stderr[-4000:]}")
    return [Finding(**row) for row in json.loads(done.stdout.splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m models.codegen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="append", choices=sorted(TARGETS), help="an LLVM CPU (default: all of them)")
    parser.add_argument("--vector-width", default="auto", choices=("auto", "256", "512"))
    parser.add_argument("--here", action="store_true", help="scan for this process's target and print JSON")
    parser.add_argument("--blocked-only", action="store_true", help="with --here: the register-block kernels only")
    args = parser.parse_args(argv)
    if args.here:
        print(json.dumps([asdict(f) for f in findings_here(args.blocked_only)]))
        return 0
    bad = 0
    for cpu in args.cpu or list(TARGETS):
        for f in findings_for(cpu, vector_width=args.vector_width):
            faults = f.faults()
            bad += bool(faults)
            print(f"{cpu:15} {f.kernel:36} fmas {f.fmas:3} {'; '.join(faults) or 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
