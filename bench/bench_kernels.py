"""Each hand-written kernel against the BLAS formulation of the same product, on this machine.

    .venv/bin/python bench/bench_kernels.py --threads 2 [--models efficientnet-b0:64:16,...] [--repeat 5]

The second training step (forward and backward) of each model records every call the layers make
to a hand kernel (the first lets kernel wisdom choose, ``models.kernels.wisdom``, so these are the
calls the engine really routes to a hand kernel on this machine) (``pointwise.matmul``, ``pointwise.weight_grad``, ``direct_conv.conv``,
``direct_conv.weight_grad``, ``small_map.group_weight_grad``) with its operands; then each
distinct call is timed twice on the same operands: the hand kernel, and the BLAS formulation of
the same product as the engine's BLAS path runs it (``models.kernels.gemm``: numpy's BLAS on the
same threads; for a grouped convolution, ``im2col`` and one GEMM per group, the copy included).
Each time is the best of ``--repeat`` runs (the machine may be shared). Printed: one row per
distinct shape, ``ratio`` = BLAS time / hand time (above 1: the hand kernel is faster), then per
kernel the count of shapes, the worst and the median ratio, weighted by time. The default models
are the shapes of B0 (64 px, batch 16), B4-G16-GN (96 px, batch 8) and the default job
(efficientnet-tiny with group norm, 32 px, batch 16).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

DEFAULT_MODELS = "efficientnet-b0:64:16,efficientnet-b4-g16-gn:96:8,efficientnet-tiny-gn:32:16"
KERNELS = ("pointwise.matmul", "pointwise.weight_grad", "direct_conv.conv", "direct_conv.weight_grad",
           "small_map.group_weight_grad")


def record(models: list[tuple[str, int, int]]) -> dict:
    """{(kernel, shape key): (model, args)} of every hand-kernel call in one training step of each
    model (operands copied)."""
    from models import build_model, softmax_cross_entropy
    from models.kernels import direct_conv as D
    from models.kernels import pointwise as P
    from models.kernels import small_map as S

    calls: dict = {}
    current = [""]

    class recorder:  # noqa: N801 (a switch shared by the wrappers)
        on = False

    def wrap(module, name, kernel):
        original = getattr(module, name)

        def record_call(*args):
            if not recorder.on:
                return original(*args)
            key = (kernel,) + tuple(a.shape if isinstance(a, np.ndarray) else a for a in args
                                    if not (isinstance(a, np.ndarray) and a.ndim == 0))
            if key not in calls:
                calls[key] = (current[0], tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args))
            return original(*args)

        setattr(module, name, record_call)
        return module, name, original

    patched = [wrap(P, "matmul", KERNELS[0]), wrap(P, "weight_grad", KERNELS[1]), wrap(D, "conv", KERNELS[2]),
               wrap(D, "weight_grad", KERNELS[3]), wrap(S, "group_weight_grad", KERNELS[4])]
    try:
        rng = np.random.default_rng(0)
        for name, res, batch in models:
            current[0] = f"{name.removeprefix('efficientnet-')}@{res}"
            model = build_model(name, num_classes=1000, resolution=res)
            x = rng.standard_normal((batch, res, res, 3)).astype(np.float32)
            labels = rng.integers(0, 1000, batch)
            for recording in (False, True):  # the first step lets kernel wisdom choose (and times every candidate)
                recorder.on = recording
                _, dlogits = softmax_cross_entropy(model.forward(x, True), labels)
                model.backward(dlogits, need_dx=False)
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
    return calls


def _im2col_products(x5, w_shape, out_hw, sh, sw, pt, pl):
    """The im2col columns [G, P, KH*KW*Cg] of a grouped convolution's input (the BLAS path's copy)."""
    from models.kernels import conv as C

    n, h, w, g, cg = x5.shape
    kh, kw = w_shape
    cols = np.empty((g, n * out_hw[0] * out_hw[1], kh * kw * cg), x5.dtype)
    C.im2col(np.ascontiguousarray(x5).reshape(n, h, w, g * cg), cols, out_hw[0], out_hw[1], kh, kw, sh, sw, pt, pl, 1, 1)
    return cols


def formulations(kernel: str, args: tuple):
    """(hand, blas): two callables computing the same product (the BLAS one into its own buffers)."""
    from models.kernels import conv as C
    from models.kernels import direct_conv as D
    from models.kernels import gemm as G
    from models.kernels import pointwise as P
    from models.kernels import small_map as S

    if kernel == "pointwise.matmul":
        a, w, y, chunks = args
        out = np.empty_like(y)
        return (lambda: P.matmul(a, w, y, chunks)), (lambda: G.matmul(a, w, out))
    if kernel == "pointwise.weight_grad":
        a, b, part = args
        out, scratch = np.empty(part.shape[1:], part.dtype), np.empty(G.scratch_shape(*part.shape[1:]), part.dtype)
        return (lambda: (P.weight_grad(a, b, part), part.sum(axis=0))), (lambda: G.matmul_tn(a, b, out, scratch))
    if kernel == "direct_conv.conv":
        x, w, y, sh, sw, pt, pl, scratch, tile, phase = args
        ho, wo = D.phase_shape(y.shape, phase)
        g, kh, kw, cg, cog = w.shape
        wg = np.ascontiguousarray(w).reshape(g, kh * kw * cg, cog)
        out = np.empty((g, x.shape[0] * ho * wo, cog), y.dtype)

        def blas():
            cols = _im2col_products(x, (kh, kw), (ho, wo), sh, sw, max(pt, 0), max(pl, 0))
            G.matmul_batched(cols, wg, out)

        return (lambda: D.conv(x, w, y, sh, sw, pt, pl, scratch, tile, phase)), blas
    x, dy = args[0], args[1]
    sh, sw, pt, pl = args[3:7]
    g, cg, cog = x.shape[3], x.shape[4], dy.shape[4]
    if kernel == "direct_conv.weight_grad":
        part, block, scratch = args[2], args[7], args[8]
        kh, kw = part.shape[2], part.shape[3] // cg
        hand = (lambda: (D.weight_grad(x, dy, part, sh, sw, pt, pl, block, scratch), part.sum(axis=0)))
    else:
        out = args[2]
        kh, kw = out.shape[1], out.shape[2]
        hand = (lambda: S.group_weight_grad(x, dy, out, sh, sw, pt, pl))
    dw = np.empty((g, kh * kw * cg, cog), x.dtype)

    def blas():  # the engine's own formulation (the im2col copy included)
        cols = np.empty((g, dy.shape[0] * dy.shape[1] * dy.shape[2], kh * kw * cg), x.dtype)
        C.im2col_weight_grad(x, dy, kh, kw, sh, sw, pt, pl, cols, dw)

    return hand, blas


def describe(key: tuple, args: tuple) -> str:
    shapes = [a.shape for a in args if isinstance(a, np.ndarray)]
    return " ".join("x".join(map(str, s)) for s in shapes[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models", default=DEFAULT_MODELS, help="name:resolution:batch, comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import models
    from bench_models import _cpu_model, _numba_target
    from models.kernels import gemm as G
    from models.kernels.wisdom import best_ms

    models.set_num_threads(args.threads)
    specs = [(n, int(r), int(b)) for n, r, b in (m.split(":") for m in args.models.split(","))]
    calls = record(specs)
    print(f"# CPU: {_cpu_model()}; numba target: {_numba_target()}; threads: {args.threads}; "
          f"BLAS: {G.describe()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'kernel':28} {'model':16} {'operands':40} {'hand ms':>9} {'BLAS ms':>9} {'ratio':>6}")
    summary: dict = {k: [] for k in KERNELS}
    for key, (model, operands) in sorted(calls.items(), key=lambda kv: (KERNELS.index(kv[0][0]), kv[1][0])):
        hand, blas = formulations(key[0], operands)
        h, b = best_ms(hand, args.repeat), best_ms(blas, args.repeat)
        summary[key[0]].append((h, b))
        print(f"{key[0]:28} {model:16} {describe(key, operands):40} {h:9.3f} {b:9.3f} {b / h:6.2f}")
    from models.kernels import wisdom

    chosen = wisdom.used()
    if chosen:
        by_kind: dict = {}
        for key, entry in chosen.items():
            by_kind.setdefault(key.split()[0], []).append(entry["choice"])
        print("# kernel wisdom (" + wisdom.machine() + "): " + "; ".join(
            f"{kind}: " + ", ".join(f"{c} {v.count(c)}" for c in sorted(set(v))) for kind, v in sorted(by_kind.items())))
    print(f"\n{'kernel':28} {'shapes':>6} {'worst':>6} {'median':>6} {'total hand ms':>14} {'total BLAS ms':>14} {'ratio':>6}")
    for kernel, rows in summary.items():
        if rows:
            ratios = [b / h for h, b in rows]
            th, tb = sum(h for h, _ in rows), sum(b for _, b in rows)
            print(f"{kernel:28} {len(rows):6} {min(ratios):6.2f} {statistics.median(ratios):6.2f} {th:14.2f} "
                  f"{tb:14.2f} {tb / th:6.2f}")


if __name__ == "__main__":
    main()
