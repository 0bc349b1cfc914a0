"""A training step of an imported ONNX network against the same network built in the layer API.

    .venv/bin/python bench/bench_onnx_train.py [--batch 16] [--steps 20] [--rounds 10] [--threads 1] [--depth 0.25]

Builds the default job's network (efficientnet-tiny: group norm, dropout and drop-connect 0.1, 28 x 28 x 1,
10 classes) twice in this one process: the built-in model, and the graph model of its ONNX export
(``tests/models/onnx_builtin.py``: torch's training-mode export with the built-in's initial weights, read by
``models.onnx``). A step is what a replica does with one micro-batch: forward in training mode, softmax
cross-entropy, backward without the input gradient. The two are stepped in alternating blocks of ``--steps``
for ``--rounds`` rounds after a warm-up (numba compile, buffers), so each block of one runs within a second of
a block of the other on a shared machine; it prints the median step time of each, their ratio
(graph / built-in: > 1 means the imported network is slower), and whether the two computed the same logits
and gradients (they should: the same kernels in the same order). The header names the CPU, the BLAS, the
threads each library runs with and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16, help="micro-batch (the default job's: 16)")
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--rounds", type=int, default=10, help="blocks of each model, alternated")
    ap.add_argument("--threads", type=int, default=1, help="numba and BLAS threads (the default job: 1 per instance)")
    ap.add_argument("--depth", type=float, default=None, help="depth coefficient (default: efficientnet-tiny's 0.25)")
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import onnx

    from bench.bench_models import _cpu_model, _pools, _threads_seen
    from models.loss import softmax_cross_entropy
    from models.onnx import load_graph
    from models.onnx.network import graph_model
    from tests.models.onnx_builtin import builtin_efficientnet, export_builtin

    builtin = builtin_efficientnet(depth=args.depth)
    graph = graph_model(load_graph(onnx.load_from_string(export_builtin(builtin, depth=args.depth)),
                                   batch_size=args.batch))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, 10, args.batch)
    models = {"built-in": builtin, "graph": graph}

    def step(model) -> None:
        logits = model.forward(x, training=True)
        _, dlogits = softmax_cross_entropy(logits, labels)
        model.backward(dlogits, need_dx=False)

    same = True
    for name, model in models.items():
        model.set_rng(np.random.default_rng(1))
        step(model)
    same = all(np.array_equal(p.grad, q.grad) for p, q in zip(graph.params(), builtin.params()))
    for _ in range(3):  # warm-up: numba dispatch, buffers
        for model in models.values():
            step(model)
    times = {name: [] for name in models}
    load_start = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, model in models.items():
            for _ in range(args.steps):
                t0 = time.perf_counter()
                step(model)
                times[name].append(time.perf_counter() - t0)
    import numba

    print(f"CPU: {_cpu_model()}; load average at start {load_start:.2f}, at end {os.getloadavg()[0]:.2f}")
    print(f"threads: numba {numba.get_num_threads()}, BLAS pools {_pools(_threads_seen())}; numpy {np.__version__}, "
          f"onnx {onnx.__version__}")
    print(f"network: efficientnet-tiny (default job, depth {builtin.config.depth}), micro-batch {args.batch}, "
          f"{len(builtin.params())} parameters; {args.rounds} rounds x {args.steps} steps each, alternated")
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:9s} median {med[name] * 1e3:8.2f} ms/step  (min {min(t) * 1e3:.2f}, "
              f"{args.batch / med[name]:.0f} images/s)")
    print(f"ratio graph / built-in: {med['graph'] / med['built-in']:.3f}; same gradients bitwise: {same}")


if __name__ == "__main__":
    main()
