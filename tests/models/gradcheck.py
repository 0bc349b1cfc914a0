"""Float64 central-difference gradient checks for layers (after chainer's check_backward)."""

from __future__ import annotations

import numpy as np


def check_layer(layer, x, training=True, samples=10, eps=1e-6, rtol=1e-5, seed=0, reset=None):
    """Compare backward's dx and every param grad with central differences of sum(y * g).

    ``samples`` random entries of x and of each parameter are perturbed (all when fewer).
    ``layer`` must be float64. ``reset`` (optional) is called before every forward, e.g. to
    re-seed dropout so each evaluation draws the same mask. The tolerance is ``rtol`` of the
    largest analytic gradient of the tensor (absolute floor 1e-7).
    """
    rng = np.random.default_rng(seed)

    def run(arg):
        if reset is not None:
            reset()
        return layer.forward(arg, training)

    y = run(x)
    g = rng.standard_normal(y.shape)
    dx = layer.backward(g)
    targets = [("x", x, dx.copy())] + [(p.name, p.data, p.grad.copy()) for p in layer.params()]
    for name, arr, analytic in targets:
        flat, an = arr.reshape(-1), analytic.reshape(-1)
        scale = max(np.abs(an).max(), 1e-2)
        idx = np.arange(flat.size) if flat.size <= samples else rng.choice(flat.size, samples, replace=False)
        for i in idx:
            old = flat[i]
            flat[i] = old + eps
            up = float(np.sum(run(x) * g))
            flat[i] = old - eps
            down = float(np.sum(run(x) * g))
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            assert abs(an[i] - numeric) <= rtol * scale, f"{name}[{i}]: analytic {an[i]!r} vs numeric {numeric!r}"


def check_model(model, loss_at, x, dx, samples=12, entries=3, eps=1e-6, rtol=1e-5, seed=0):
    """Central differences of ``loss_at()`` (a float64 model's loss) against ``dx`` and the ``grad`` of
    ``samples`` random parameters, ``entries`` random elements each, after a matching backward.

    Gradients that are zero in exact arithmetic (a bias feeding only batch norms) are compared at
    1 % of the largest gradient: finite differences carry ~1e-8 of rounding noise there.
    """
    rng = np.random.default_rng(seed)
    floor = 1e-2 * max(np.abs(p.grad).max() for p in model.params())
    checks = [("x", x, dx.copy())] + [(p.name, p.data, p.grad.copy()) for p in rng.choice(model.params(), samples)]
    for name, arr, grad in checks:
        for i in rng.choice(arr.size, min(entries, arr.size), replace=False):
            flat, old = arr.reshape(-1), arr.reshape(-1)[i]
            flat[i] = old + eps
            up = loss_at()[0]
            flat[i] = old - eps
            down = loss_at()[0]
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            assert abs(grad.reshape(-1)[i] - numeric) <= rtol * max(np.abs(grad).max(), floor), name
