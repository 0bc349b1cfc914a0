"""Training-step and convolution throughput of ``models/`` against PyTorch CPU, side by side.

    .venv/bin/python bench/bench_models.py [--threads 2] [--steps 5] [--rows tiny32,b0-64,b0-224,dw3x3,pw1x1]

Every row runs in its own subprocess (so peak RSS is per row and per framework), ours and
PyTorch (channels_last, the same intra-op thread count, ``torch.optim.SGD`` with momentum)
on the same shapes, alternating ours/torch for ``--rounds`` rounds and keeping each side's best
step (the machine may be shared). Training rows time forward + softmax cross-entropy +
backward + SGD momentum step and report images/s; conv rows time one forward+backward (input and weight
gradients) of a depthwise 3x3 and a 1x1 (96 -> 96) conv on [32, 56, 56, 96]. Both frameworks
warm up first (numba compile, oneDNN primitive creation). ratio = ours / torch throughput
(> 1: ours is faster). The PyTorch model is ``tests/models/torch_efficientnet_ref.py``, which has
torchvision's exact structure.
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
ROWS = {  # name: (kind, model, resolution, batch)
    "tiny32": ("train", "tiny", 32, 128),
    "b0-64": ("train", "b0", 64, 64),
    "b0-224": ("train", "b0", 224, 32),
    "dw3x3": ("conv", "dw", 56, 32),
    "pw1x1": ("conv", "pw", 56, 32),
}


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


def ours(row: str, steps: int) -> dict:
    import numpy as np

    from models import build_model, softmax_cross_entropy
    from models.conv import Conv2d
    from models.optim import OptimConfig, make_optimizer

    kind, variant, res, batch = ROWS[row]
    rng = np.random.default_rng(0)
    if kind == "conv":
        c = 96
        conv = Conv2d("c", "b", c, c, 3 if variant == "dw" else 1, 1, "symmetric", c if variant == "dw" else 1)
        x = rng.standard_normal((batch, res, res, c)).astype(np.float32)
        g = rng.standard_normal((batch, res, res, c)).astype(np.float32)

        def step():
            conv.forward(x, True)
            conv.backward(g)
    else:
        model = build_model(f"efficientnet-{variant}", num_classes=1000, resolution=res)
        opt = make_optimizer(OptimConfig(name="sgd", momentum=0.9, weight_decay=0.0), model.params())
        x = rng.standard_normal((batch, res, res, 3)).astype(np.float32)
        labels = rng.integers(0, 1000, batch)

        def step():
            _, dlogits = softmax_cross_entropy(model.forward(x, True), labels)
            model.backward(dlogits, need_dx=False)
            opt.step(0.01)
    sec = _time(step, 2, steps)
    return {"images_per_s": batch / sec, "ms": sec * 1e3, "peak_rss_mib": _peak_rss_mib()}


def theirs(row: str, steps: int) -> dict:
    import torch

    sys.path.insert(0, ROOT)
    from tests.models.torch_efficientnet_ref import EfficientNetRef

    kind, variant, res, batch = ROWS[row]
    torch.manual_seed(0)
    cl = torch.channels_last
    if kind == "conv":
        c = 96
        conv = torch.nn.Conv2d(c, c, 3 if variant == "dw" else 1, padding=1 if variant == "dw" else 0,
                               groups=c if variant == "dw" else 1, bias=False).to(memory_format=cl)
        x = torch.randn(batch, c, res, res).contiguous(memory_format=cl).requires_grad_(True)
        g = torch.randn(batch, c, res, res).contiguous(memory_format=cl)

        def step():
            conv.weight.grad = None
            x.grad = None
            conv(x).backward(g)
    else:
        model = EfficientNetRef(variant, num_classes=1000).to(memory_format=cl).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 3, res, res).contiguous(memory_format=cl)
        labels = torch.randint(0, 1000, (batch,))

        def step():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), labels).backward()
            opt.step()
    sec = _time(step, 2, steps)
    return {"images_per_s": batch / sec, "ms": sec * 1e3, "peak_rss_mib": _peak_rss_mib()}


def _worker(args) -> None:
    if args.framework == "torch":
        import torch

        torch.set_num_threads(args.threads)
        print(json.dumps(theirs(args.worker, args.steps)))
    else:
        print(json.dumps(ours(args.worker, args.steps)))


def _run(row: str, framework: str, args) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, __file__, "--worker", row, "--framework", framework, "--threads", str(args.threads),
           "--steps", str(args.steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{framework} {row} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row (after 2 warm-up steps)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {list(ROWS)}")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternate ours/torch this many times per row and keep each one's best")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--framework", default="ours", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    print(f"threads={args.threads} steps={args.steps} rounds={args.rounds}; best step of each; "
          f"ratio = ours/torch throughput (>1: ours faster); load average {os.getloadavg()[0]:.1f}")
    print(f"{'row':<10}{'ours img/s':>12}{'torch img/s':>13}{'ratio':>8}{'ours ms':>10}{'torch ms':>10}"
          f"{'ours RSS MiB':>14}{'torch RSS MiB':>15}")
    for row in args.rows.split(","):
        if row not in ROWS:
            raise SystemExit(f"unknown row {row!r}; choose from {list(ROWS)}")
        runs = [(_run(row, "ours", args), _run(row, "torch", args)) for _ in range(args.rounds)]
        a = max((r[0] for r in runs), key=lambda r: r["images_per_s"])
        b = max((r[1] for r in runs), key=lambda r: r["images_per_s"])
        print(f"{row:<10}{a['images_per_s']:>12.1f}{b['images_per_s']:>13.1f}"
              f"{a['images_per_s'] / b['images_per_s']:>8.2f}{a['ms']:>10.1f}{b['ms']:>10.1f}"
              f"{a['peak_rss_mib']:>14.0f}{b['peak_rss_mib']:>15.0f}", flush=True)


if __name__ == "__main__":
    main()
