"""Training-step and layer throughput of ``models/`` against PyTorch CPU, side by side.

    .venv/bin/python bench/bench_models.py --threads 2 --steps 4 --rounds 4 [--rows tiny32,b4-g16-gn,...]

Every row runs in its own subprocess (so peak RSS is per row and per framework), ours and
PyTorch (channels_last, the same intra-op thread count, ``torch.optim.SGD`` with momentum)
on the same shapes, alternating ours/torch for ``--rounds`` rounds so both see the same load,
and keeping each side's best step (the machine may be shared). Training rows time forward +
softmax cross-entropy + backward + SGD momentum step and report images/s; layer rows time one
forward+backward (input and weight gradients) on [32, 56, 56, 96]: a depthwise 3x3, a 1x1
(96 -> 96), a G16 3x3 (6 groups of 16) convolution and a 4-group group norm. Both frameworks
warm up first (numba compile, oneDNN primitive creation). ratio = ours / torch throughput
(> 1: ours is faster). The PyTorch model is ``tests/models/torch_efficientnet_ref.py``, which
has torchvision's exact structure, built with the same variant (G16: group size 16, expansion 4;
GN: 4-group group norm).

GFLOP/s counts the model's forward + backward FLOPs from ``Model.profile`` (a multiply-add is
2, the same count for both frameworks); "of peak" divides it by this machine's float32 GEMM
rate measured in the same run (numpy's BLAS, 2048 x 2048, the same thread count). The header
says which threads each library really runs with (threadpoolctl, numba, torch) and the BLAS
kernels in use.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = {  # name: (kind, model or layer, resolution, batch)
    "tiny32": ("train", "efficientnet-tiny", 32, 128),
    "b0-64": ("train", "efficientnet-b0", 64, 64),
    "b0-224": ("train", "efficientnet-b0", 224, 32),
    "tiny-g16-gn": ("train", "efficientnet-tiny-g16-gn", 32, 128),
    "b0-g16-gn": ("train", "efficientnet-b0-g16-gn", 64, 64),
    "b4-g16-gn": ("train", "efficientnet-b4-g16-gn", 96, 8),
    "dw3x3": ("layer", "dw", 56, 32),
    "pw1x1": ("layer", "pw", 56, 32),
    "g16-3x3": ("layer", "g16", 56, 32),
    "gn": ("layer", "gn", 56, 32),
}
C = 96  # channels of the layer rows
CONV = {"dw": (3, C), "pw": (1, 1), "g16": (3, C // 16)}  # kernel, groups
GN_GROUPS = 4


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time(step, warmup: int, steps: int) -> float:
    """Best (minimum) seconds per step: the least disturbed by other load on a shared machine."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def _threads_seen() -> list[dict]:
    """What each thread pool in this process runs with (threadpoolctl when installed)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [{k: d.get(k) for k in ("internal_api", "prefix", "num_threads", "architecture")} for d in threadpool_info()]


def _row_flops(kind: str, what: str, res: int, batch: int) -> float:
    """Forward + backward FLOPs of one step (multiply-add = 2), from our cost model."""
    if kind == "train":
        from models import build_model

        return float(sum(p.flops_fwd + p.flops_bwd for p in build_model(what, 1000, resolution=res).profile(batch)))
    if what == "gn":
        return 0.0
    k, groups = CONV[what]
    return 6.0 * batch * res * res * C * k * k * (C // groups)


def make_step(row: str):
    """One step of ``row`` with ``models/`` (whichever ``models`` package comes first on sys.path):
    a training step (forward, loss, backward, SGD with momentum) or a layer's forward + backward."""
    import numpy as np

    from models import build_model, softmax_cross_entropy
    from models.conv import Conv2d
    from models.norm import GroupNorm
    from models.optim import OptimConfig, make_optimizer

    kind, what, res, batch = ROWS[row]
    rng = np.random.default_rng(0)
    if kind == "layer":
        if what == "gn":
            layer = GroupNorm("n", "b", C, GN_GROUPS)
        else:
            k, groups = CONV[what]
            layer = Conv2d("c", "b", C, C, k, 1, "symmetric", groups)
        x = rng.standard_normal((batch, res, res, C)).astype(np.float32)
        g = rng.standard_normal((batch, res, res, C)).astype(np.float32)

        def step():
            layer.forward(x, True)
            layer.backward(g)
    else:
        model = build_model(what, num_classes=1000, resolution=res)
        opt = make_optimizer(OptimConfig(name="sgd", momentum=0.9, weight_decay=0.0), model.params())
        x = rng.standard_normal((batch, res, res, 3)).astype(np.float32)
        labels = rng.integers(0, 1000, batch)

        def step():
            _, dlogits = softmax_cross_entropy(model.forward(x, True), labels)
            model.backward(dlogits, need_dx=False)
            opt.step(0.01)
    return step


def ours(row: str, steps: int) -> dict:
    import models

    kind, what, res, batch = ROWS[row]
    step = make_step(row)
    sec = _time(step, 2, steps)
    import numba

    from models.kernels import gemm as _gemm
    return {"ms": sec * 1e3, "peak_rss_mib": _peak_rss_mib(), "flops": _row_flops(kind, what, res, batch),
            "target": _numba_target(),
            "threads": {"models": models.get_num_threads(), "numba": numba.get_num_threads(),
                        "gemm pool": _gemm.pool_size(), "gemm kernel": _gemm.describe(),
                        "numba layer": numba.threading_layer(), "pools": _threads_seen()}}


def _torch_model(name: str):
    sys.path.insert(0, ROOT)
    from tests.models.torch_efficientnet_ref import EfficientNetRef, norm_factory

    parts = name.split("-")[1:]
    kw = {}
    if "g16" in parts:
        kw.update(group_size=16, expand_ratio=4)
    if "gn" in parts:
        kw.update(norm=norm_factory("group", eps=1e-3, groups=4))
    return EfficientNetRef(parts[0], num_classes=1000, **kw)


def theirs(row: str, steps: int) -> dict:
    import torch

    kind, what, res, batch = ROWS[row]
    torch.manual_seed(0)
    cl = torch.channels_last
    if kind == "layer":
        if what == "gn":
            layer = torch.nn.GroupNorm(GN_GROUPS, C, eps=1e-3)
        else:
            k, groups = CONV[what]
            layer = torch.nn.Conv2d(C, C, k, padding=k // 2, groups=groups, bias=False).to(memory_format=cl)
        x = torch.randn(batch, C, res, res).contiguous(memory_format=cl).requires_grad_(True)
        g = torch.randn(batch, C, res, res).contiguous(memory_format=cl)

        def step():
            for p in layer.parameters():
                p.grad = None
            x.grad = None
            layer(x).backward(g)
    else:
        model = _torch_model(what).to(memory_format=cl).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 3, res, res).contiguous(memory_format=cl)
        labels = torch.randint(0, 1000, (batch,))

        def step():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), labels).backward()
            opt.step()
    sec = _time(step, 2, steps)
    return {"ms": sec * 1e3, "peak_rss_mib": _peak_rss_mib(),
            "threads": {"torch intra-op": torch.get_num_threads(), "torch inter-op": torch.get_num_interop_threads(),
                        "cpu capability": torch.backends.cpu.get_cpu_capability(),
                        "mkldnn": torch.backends.mkldnn.is_available(), "pools": _threads_seen()}}


def sgemm_peak(steps: int) -> dict:
    """Float32 GEMM rate of numpy's BLAS on 2048 x 2048 (its own threads, as set by the env)."""
    import numpy as np

    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b, out = a.T.copy(), np.empty((n, n), np.float32)
    sec = _time(lambda: np.matmul(a, b, out=out), 1, max(steps, 3))
    return {"gflops": 2 * n ** 3 / sec / 1e9, "pools": _threads_seen()}


def _worker(args) -> None:
    if args.framework == "torch":
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(theirs(args.worker, args.steps)))
    elif args.framework == "sgemm":
        print(json.dumps(sgemm_peak(args.steps)))
    else:
        print(json.dumps(ours(args.worker, args.steps)))


def _run(row: str, framework: str, args) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.vector_width:
        env["POPRUN_VECTOR_WIDTH"] = args.vector_width
    cmd = [sys.executable, __file__, "--worker", row, "--framework", framework, "--threads", str(args.threads),
           "--steps", str(args.steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{framework} {row} failed (exit status {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _numba_target() -> str:
    """What numba compiles our kernels for: the CPU name, its widest vector ISA, and the loop
    vector width asked for (``POPRUN_VECTOR_WIDTH``; auto leaves it to LLVM, which prefers 256-bit
    vectors on most AVX-512 CPUs)."""
    import numba
    from llvmlite import binding

    from jit import target_features, vector_width

    features = target_features().split(",")
    isa = next((name for name in ("avx512f", "avx2", "avx", "sse4.2") if f"+{name}" in features), "baseline")
    return f"{numba.config.CPU_NAME or binding.get_host_cpu_name()}, {isa}, loop vectors {vector_width()}"


def _cpu_model() -> str:
    from jit import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} logical CPUs"


def _pools(pools: list[dict]) -> str:
    return ", ".join(f"{p['prefix']} ({p['internal_api']}{', ' + p['architecture'] if p.get('architecture') else ''})"
                     f" {p['num_threads']} thr" for p in pools) or "threadpoolctl not installed"


def _header(args, peak: dict, a: dict, b: dict) -> None:
    ta, tb = a["threads"], b["threads"]
    print(f"CPU: {_cpu_model()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"sgemm peak (numpy 2048^2, {args.threads} thr): {peak['gflops']:.1f} GFLOP/s; numpy BLAS: "
          f"{_pools(peak['pools'])}")
    print(f"ours: numba target {a['target']}; models {ta['models']} thr, numba {ta['numba']} thr "
          f"({ta['numba layer']} layer); GEMMs split over "
          f"{ta['gemm pool']} thread(s): {ta['gemm kernel']}; pools seen: {_pools(ta['pools'])}")
    print(f"torch: intra-op {tb['torch intra-op']}, inter-op {tb['torch inter-op']}, capability "
          f"{tb['cpu capability']}, oneDNN {tb['mkldnn']}; pools seen: {_pools(tb['pools'])}")
    print(f"threads={args.threads} steps={args.steps} rounds={args.rounds}; best step of each; "
          f"ratio = ours/torch throughput (>1: ours faster)")
    print(f"{'row':<12}{'ours/s':>9}{'torch/s':>9}{'ratio':>7}{'ours ms':>9}{'torch ms':>9}{'ours GF/s':>10}"
          f"{'torch GF/s':>11}{'ours %pk':>9}{'torch %pk':>10}{'RSS ours/torch MiB':>20}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row (after 2 warm-up steps)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {list(ROWS)}")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternate ours/torch this many times per row and keep each one's best")
    parser.add_argument("--vector-width", choices=("auto", "256", "512"),
                        help="POPRUN_VECTOR_WIDTH for our kernels (the jit package): on AVX-512 CPUs, run once with "
                             "each to compare (default: the environment's, else auto)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--framework", default="ours", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:  # "" is the sgemm worker (no row)
        _worker(args)
        return
    rows = args.rows.split(",")
    for row in rows:
        if row not in ROWS:
            raise SystemExit(f"--rows: unknown row {row!r}; choose from {list(ROWS)}")
    peak = max((_run("", "sgemm", args) for _ in range(2)), key=lambda r: r["gflops"])
    for i, row in enumerate(rows):
        runs = [(_run(row, "ours", args), _run(row, "torch", args)) for _ in range(args.rounds)]
        a = min((r[0] for r in runs), key=lambda r: r["ms"])
        b = min((r[1] for r in runs), key=lambda r: r["ms"])
        if i == 0:
            _header(args, peak, a, b)
        batch, flops = ROWS[row][3], a["flops"]
        gf = [flops / r["ms"] / 1e6 for r in (a, b)]
        cells = (f"{gf[0]:>10.1f}{gf[1]:>11.1f}{100 * gf[0] / peak['gflops']:>8.1f}%"
                 f"{100 * gf[1] / peak['gflops']:>9.1f}%") if flops else f"{'-':>10}{'-':>11}{'-':>9}{'-':>10}"
        print(f"{row:<12}{batch * 1e3 / a['ms']:>9.1f}{batch * 1e3 / b['ms']:>9.1f}{b['ms'] / a['ms']:>7.2f}"
              f"{a['ms']:>9.1f}{b['ms']:>9.1f}{cells}{a['peak_rss_mib']:>11.0f} / {b['peak_rss_mib']:<6.0f}",
              flush=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
