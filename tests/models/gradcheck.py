"""Float64 central-difference gradient checks for layers (after chainer's check_backward)."""

from __future__ import annotations

import numpy as np


def _loss(layer, x, g, training):
    return float(np.sum(layer.forward(x, training) * g))


def check_layer(layer, x, training=True, samples=12, eps=1e-6, rtol=1e-6, atol=1e-8, seed=0,
                check_dx=True):
    """Compare backward's dx and param grads with central differences of sum(y * g).

    ``samples`` random entries of x and of every parameter are perturbed (all of them when
    the tensor is smaller). ``layer`` must be float64.
    """
    rng = np.random.default_rng(seed)
    y = layer.forward(x, training)
    g = rng.standard_normal(y.shape)
    dx = layer.backward(g)
    dx = None if dx is None else dx.copy()
    grads = {p.name: p.grad.copy() for p in layer.params()}
    targets = [("x", x, dx)] if check_dx else []
    targets += [(p.name, p.data, grads[p.name]) for p in layer.params()]
    for name, arr, analytic in targets:
        flat = arr.reshape(-1)
        idx = np.arange(flat.size) if flat.size <= samples else rng.choice(flat.size, samples, replace=False)
        for i in idx:
            old = flat[i]
            flat[i] = old + eps
            up = _loss(layer, x, g, training)
            flat[i] = old - eps
            down = _loss(layer, x, g, training)
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            got = analytic.reshape(-1)[i]
            assert abs(got - numeric) <= atol + rtol * max(abs(numeric), abs(got)) * 10 + 1e-7 * abs(numeric), (
                f"{name}[{i}]: analytic {got!r} vs numeric {numeric!r}")
