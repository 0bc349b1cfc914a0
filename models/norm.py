"""Batch norm and group norm over NHWC channels, each with an optional fused activation.

The activation is fused for speed (one pass over memory instead of two) but reported as a
separate layer in the profile, and it has no parameters, so the state_dict layout is
torchvision's ``Conv2dNormActivation``: ``<prefix>.weight``/``.bias`` (+ running stats).
Both keep their *input* for backward and recompute the normalised value from it. With SiLU they
also keep sigmoid(z), except batch norm for tensors of at least ``RECOMPUTE_SIGMOID_ELEMS``
elements: those recompute it in backward with the forward's exact arithmetic (the same bits), trading one
exp per element (about as long as the forward pass again) for a buffer the size of the output.
"""

from __future__ import annotations

import numpy as np

from jit import is_enabled
from models.kernels import group_norm as GK
from models.kernels import norm as K
from models.layer import ConsumesGradient, Layer, Shape
from models.param import Param

ACTS = {None: K.NONE, "silu": K.SILU, "relu": K.RELU}
_CHUNKS = 32  # row chunks for the parallel column reductions
# At 2^24 elements, B0 at 224 px batch 32 recomputes for block2a's expand norm only ([32, 112, 112, 96]):
# 145 MiB less peak RSS (3345 -> about 3200 MiB, below PyTorch's 3309) for +49 ms of backward and -7 ms of
# forward on that layer (measured on Zen 1, 2 threads: 76/75 -> 69/124 ms), about 1.5 % of the step.
RECOMPUTE_SIGMOID_ELEMS = 1 << 24


def _act_code(act: str | None, name: str) -> int:
    if act not in ACTS:
        raise ValueError(f"norm {name}: activation {act!r} is not one of {sorted(map(str, ACTS))}")
    return ACTS[act]


def _split(mean: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> None:
    """mean (float64) = hi + lo to about twice the working precision."""
    hi[...] = mean
    lo[...] = mean - hi


def _chunks(m: int) -> int:
    return max(1, min(_CHUNKS, m)) if is_enabled() else 1


class _Norm(ConsumesGradient, Layer):
    kind = "norm"
    output_private = True
    recomputes = True  # may recompute SiLU's sigmoid in backward (large tensors)

    def __init__(self, name, block, channels, eps, act, dtype):
        super().__init__(name, block, dtype)
        if eps <= 0:
            raise ValueError(f"norm {name}: epsilon must be > 0, got {eps}")
        self.channels, self.eps, self.act = channels, float(eps), _act_code(act, name)
        self.weight = Param(self._key("weight"), np.ones(channels, self.dtype), "norm_scale")
        self.bias = Param(self._key("bias"), np.zeros(channels, self.dtype), "norm_offset")

    def params(self) -> list[Param]:
        return [self.weight, self.bias]

    def _tiled(self, key: str, values: np.ndarray, k: int, dtype=None) -> np.ndarray:
        """``values`` (one per channel) repeated ``k`` times, cast to ``dtype`` (the layer's by
        default), in a buffer of this layer (np.tile costs several microseconds a call, which
        adds up over a small tensor's many per-channel arrays)."""
        out = self._buf(key, (k * values.shape[0],), dtype)
        out.reshape(k, -1)[...] = values
        return out

    def _sig_buf(self, y):
        """Where SiLU keeps sigmoid(z) for backward (``self.keep``), else y as an unused stand-in."""
        self.keep = self.act == K.SILU and (y.size < RECOMPUTE_SIGMOID_ELEMS or not self.recomputes)
        return self._buf("sig", y.shape) if self.keep else y

    def _check(self, x):
        if x.ndim != 4 or x.shape[3] != self.channels:
            raise ValueError(f"norm {self.name}: expected NHWC input with {self.channels} channels, got {x.shape}")

    def profile(self, shape: Shape):
        e = int(np.prod(shape))
        out = [self._record(shape, 8 * e, 12 * e, e)]
        if self.act != K.NONE:
            out.append(self._record(shape, 4 * e, 6 * e, 0, kind="act", own_params=False))
        return out


class BatchNorm2d(_Norm):
    """Batch norm (torch semantics: biased variance to normalise, unbiased in the running
    variance, ``running = (1 - momentum)*running + momentum*batch``), then ``act``.

    Keeps: the input x, sigmoid(z) when the activation is SiLU (unless the tensor is large: see
    the module docstring), and the per-channel mean, inverse std and scale (tiled, see
    ``kernels.norm.wide_rows``).
    """

    def __init__(self, name: str, block: str, channels: int, eps: float = 1e-3, momentum: float = 0.01,
                 act: str | None = None, dtype=np.float32) -> None:
        super().__init__(name, block, channels, eps, act, dtype)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"batch norm {name}: momentum must be in [0, 1] (torch convention), got {momentum}")
        self.momentum = float(momentum)
        self.running_mean = np.zeros(channels, self.dtype)
        self.running_var = np.ones(channels, self.dtype)
        self.num_batches_tracked = np.zeros((), np.int64)

    def buffers(self) -> dict[str, np.ndarray]:
        return {self._key("running_mean"): self.running_mean, self._key("running_var"): self.running_var,
                self._key("num_batches_tracked"): self.num_batches_tracked}

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        self._check(x)
        c = self.channels
        m = x.size // c
        k = K.wide_rows(m, c)
        xw = x.reshape(-1, k * c)  # [M/k, k*C]: long inner loops; per-channel arrays tiled k times
        chunks = _chunks(xw.shape[0])
        mean, var = self._buf("mean", (c,), np.float64), self._buf("var", (c,), np.float64)
        if training:
            if m < 2:
                raise ValueError(f"batch norm {self.name}: training needs more than one value per channel, "
                                 f"got input shape {x.shape}")
            s1, s2 = self._buf("s1", (k * c,), np.float64), self._buf("s2", (k * c,), np.float64)
            shift = self._tiled("shift", xw[0, :c], k, np.float64)
            K.column_moments(xw, shift, s1, s2, chunks)
            d1 = s1.reshape(k, c).sum(axis=0) / m
            mean[...] = shift[:c] + d1
            var[...] = np.maximum(s2.reshape(k, c).sum(axis=0) / m - d1 * d1, 0.0)
            self.running_mean[...] = (1 - self.momentum) * self.running_mean + self.momentum * mean
            self.running_var[...] = (1 - self.momentum) * self.running_var + self.momentum * var * (m / (m - 1))
            self.num_batches_tracked += 1
        else:
            mean[...] = self.running_mean
            var[...] = self.running_var
        invstd = 1.0 / np.sqrt(var + self.eps)
        mu, mu_lo = np.empty(c, self.dtype), np.empty(c, self.dtype)
        _split(mean, mu, mu_lo)
        a = (self.weight.data * invstd).astype(self.dtype)
        self.k, self.training, self.x = k, training, x
        self.mu, self.mu_lo, self.a = self._tiled("mu", mu, k), self._tiled("mu_lo", mu_lo, k), self._tiled("a", a, k)
        self.beta, self.invstd = self._tiled("beta", self.bias.data, k), self._tiled("invstd", invstd, k, np.float64)
        y = self._buf("y", x.shape)
        self.sig = self._sig_buf(y)
        K.affine_act(xw, self.mu, self.mu_lo, self.a, self.beta, y.reshape(xw.shape), self.sig.reshape(xw.shape),
                     self.act, self.keep)
        return y

    def _backward(self, dy: np.ndarray, consume: bool) -> np.ndarray:
        c, k = self.channels, self.k
        xw = self.x.reshape(-1, k * c)
        dx = self._grad_buf(self.x.shape, dy if consume else None)  # over dy: each dy is read before dx is written
        dxw = dx.reshape(xw.shape)
        s0, s1 = self._buf("s0", (k * c,), np.float64), self._buf("s1", (k * c,), np.float64)
        K.norm_backward_reduce(xw, dy.reshape(xw.shape), self.sig.reshape(xw.shape), self.mu, self.mu_lo, self.a,
                               self.beta, self.invstd, dxw, s0, s1, self.act, self.keep, _chunks(xw.shape[0]))
        dbeta, dgamma = s0.reshape(k, c).sum(axis=0), s1.reshape(k, c).sum(axis=0)
        self.weight.grad[...] = dgamma
        self.bias.grad[...] = dbeta
        if self.training:  # dx = a * (dz - mean(dz) - xhat * mean(dz * xhat))
            m = self.x.size // c
            k0 = self._tiled("k0", dbeta / m, k)
            k1 = self._tiled("k1", dgamma / m * self.invstd[:c], k)
            K.norm_backward_apply(xw, self.mu, self.mu_lo, self.a, k0, k1, dxw)
        else:
            K.scale_columns(dxw, self.a)
        return dx


class GroupNorm(_Norm):
    """Group norm over (H, W, C/groups) per image (torch semantics; groups=1 is layer norm
    over H, W, C), then ``act``. Keeps: the input x, sigmoid(z) for SiLU (always), and the
    per-image, per-group statistics.
    """

    recomputes = False

    def __init__(self, name: str, block: str, channels: int, groups: int, eps: float = 1e-3,
                 act: str | None = None, dtype=np.float32) -> None:
        super().__init__(name, block, channels, eps, act, dtype)
        if groups < 1 or channels % groups:
            raise ValueError(f"group norm {name}: groups={groups} must divide the {channels} channels")
        self.groups = groups

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        self._check(x)
        n, c, g = x.shape[0], self.channels, self.groups
        x3 = x.reshape(n, -1, c)
        invstd = self._buf("invstd", (n, g), np.float64)
        self.mu, self.mu_lo, self.a = self._buf("mu", (n, c)), self._buf("mu_lo", (n, c)), self._buf("a", (n, c))
        GK.group_stats(x3, self.weight.data, self.eps, self.mu, self.mu_lo, self.a, invstd)
        self.invstd, self.x = invstd, x
        y = self._buf("y", x.shape)
        self.sig = self._sig_buf(y)
        GK.group_affine_act(x3, self.mu, self.mu_lo, self.a, self.bias.data, y.reshape(x3.shape),
                            self.sig.reshape(x3.shape), self.act, self.keep)
        return y

    def _backward(self, dy: np.ndarray, consume: bool) -> np.ndarray:
        n, c = self.x.shape[0], self.channels
        dx = self._grad_buf(self.x.shape, dy if consume else None)  # over dy: each dy is read before dx is written
        dg, db = self._temp("norm_dgamma", (n, c), np.float64), self._temp("norm_dbeta", (n, c), np.float64)
        shape3 = (n, -1, c)
        GK.group_norm_backward(self.x.reshape(shape3), dy.reshape(shape3), self.sig.reshape(shape3), self.mu,
                              self.mu_lo, self.a, self.bias.data, self.invstd, self.weight.data, dx.reshape(shape3),
                              dg, db, self.act)
        self.weight.grad[...] = dg.sum(axis=0)
        self.bias.grad[...] = db.sum(axis=0)
        return dx
