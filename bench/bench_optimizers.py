"""Time one optimizer step over EfficientNet-sized parameters, against named baselines.

    .venv/bin/python bench/bench_optimizers.py [--millions 5.3] [--repeats 10] [--threads 1]

Baselines, measured in the same run on the same shapes and values:
* ``naive numpy``: the same update written as plain allocating expressions
  (``v = m*v + lr*(g + wd*w)``), what the in-place/scratch-buffer code replaces;
* ``torch.optim``: ``SGD(momentum, weight_decay)`` (foreach) for sgd/lars, ``AdamW`` for adamw,
  ``RMSprop(momentum)`` for rmsprop (torch's RMSprop differs in form; the work is comparable).
LARS has no torch counterpart; its baseline is torch SGD, which does the same passes minus
the two norms. Ratios > 1 mean ours is slower.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from models.optim import OptimConfig, make_optimizer
from models.param import Param


B0_BLOCKS = [(1, 32, 16, 1, 3), (2, 16, 24, 6, 3), (2, 24, 40, 6, 5), (3, 40, 80, 6, 3),
             (3, 80, 112, 6, 5), (4, 112, 192, 6, 5), (1, 192, 320, 6, 3)]  # repeats, in, out, expand, k


def efficientnet_like_shapes(millions: float) -> list[tuple[str, tuple[int, ...], str]]:
    """EfficientNet-B0's tensors (5.29 M parameters), channels scaled by sqrt(millions / 5.3)."""
    scale = max(millions / 5.3, 1e-3) ** 0.5

    def ch(c: int) -> int:
        return max(int(round(c * scale)), 4)

    shapes: list[tuple[str, tuple[int, ...], str]] = [("stem.weight", (3, 3, 3, ch(32)), "weight")]
    for i, (repeats, cin, cout, e, k) in enumerate(B0_BLOCKS):
        for r in range(repeats):
            c_in = ch(cin if r == 0 else cout)
            mid, se = c_in * e, max(1, c_in // 4)
            b = f"blocks.{i}.{r}"
            if e != 1:
                shapes.append((f"{b}.expand.weight", (1, 1, c_in, mid), "weight"))
            shapes += [(f"{b}.dw.weight", (k, k, 1, mid), "weight"),
                       (f"{b}.se.reduce.weight", (mid, se), "weight"), (f"{b}.se.reduce.bias", (se,), "bias"),
                       (f"{b}.se.expand.weight", (se, mid), "weight"), (f"{b}.se.expand.bias", (mid,), "bias"),
                       (f"{b}.project.weight", (1, 1, mid, ch(cout)), "weight")]
            for j, c in enumerate((mid, mid, ch(cout)) if e != 1 else (mid, ch(cout))):
                shapes += [(f"{b}.norm{j}.weight", (c,), "norm_scale"), (f"{b}.norm{j}.bias", (c,), "norm_offset")]
    shapes += [("head.weight", (1, 1, ch(320), ch(1280)), "weight"),
               ("classifier.weight", (ch(1280), 1000), "weight"), ("classifier.bias", (1000,), "bias")]
    return shapes


def make_params(millions: float, seed: int = 0) -> list[Param]:
    rng = np.random.default_rng(seed)
    params = []
    for name, shape, kind in efficientnet_like_shapes(millions):
        p = Param(name, rng.standard_normal(shape).astype(np.float32), kind)
        p.grad[...] = rng.standard_normal(shape)
        params.append(p)
    return params


def naive_step(name: str, params: list[Param], state: dict, lr: float, m: float, wd: float) -> None:
    """The same updates as plain allocating numpy expressions (the baseline we replace)."""
    for p in params:
        v = state.setdefault(p.name, np.zeros_like(p.data))
        g = p.grad + wd * p.data if p.decays else p.grad
        if name == "lars" and p.decays:
            wn, gn = np.linalg.norm(p.data), np.linalg.norm(p.grad)
            lr_p = lr * (0.001 * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0)
        else:
            lr_p = lr
        state[p.name] = v = m * v + lr_p * g
        p.data -= v


def time_it(fn, repeats: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def torch_baseline(name: str, params: list[Param], wd: float):
    import torch  # bench-only oracle

    tensors = [torch.tensor(p.data.copy()) for p in params]
    for t, p in zip(tensors, params):
        t.grad = torch.tensor(p.grad.copy())
    if name in ("sgd", "lars"):
        opt = torch.optim.SGD(tensors, lr=0.1, momentum=0.9, weight_decay=wd)
    elif name == "adamw":
        opt = torch.optim.AdamW(tensors, lr=0.1, weight_decay=wd)
    else:
        opt = torch.optim.RMSprop(tensors, lr=0.1, momentum=0.9, weight_decay=wd)
    return opt.step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--millions", type=float, default=5.3, help="approximate parameter count (millions)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    n = sum(p.data.size for p in make_params(args.millions))
    print(f"optimizer step over {n / 1e6:.2f} M float32 parameters, best of {args.repeats}")
    print(f"{'optimizer':<10}{'ours ms':>10}{'naive ms':>10}{'torch ms':>10}{'ours/naive':>12}{'ours/torch':>12}")
    for name in ("sgd", "lars", "adamw", "rmsprop"):
        params = make_params(args.millions)
        opt = make_optimizer(OptimConfig(name=name, weight_decay=1e-5, eps=1e-3), params)
        ours = time_it(lambda: opt.step(0.1), args.repeats)
        naive = float("nan")
        if name in ("sgd", "lars"):
            state: dict = {}
            naive = time_it(lambda: naive_step(name, params, state, 0.1, 0.9, 1e-5), args.repeats)
        ref = time_it(torch_baseline(name, params, 1e-5), args.repeats) if torch else float("nan")
        print(f"{name:<10}{ours * 1e3:>10.1f}{naive * 1e3:>10.1f}{ref * 1e3:>10.1f}"
              f"{ours / naive:>12.2f}{ours / ref:>12.2f}")


if __name__ == "__main__":
    main()
