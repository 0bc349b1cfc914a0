"""The graph model's ops: each reads computed tensors (by name) and writes one, forward and backward
side by side. Tensors of rank 4 are NHWC inside the engine (ONNX's NCHW only at the file's edges);
other ranks are as in ONNX.

``LayerOp`` runs one of the engine's layers (convolution, norms, dense, pooling, ReLU/sigmoid/SiLU): no
second implementation of those kernels here. The rest is element-wise numpy that the layer API has no
layer for (broadcasting Add/Sub/Mul/Div, Clip, Tanh, HardSigmoid, HardSwish), data movement
(Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Identity), Concat, and stochastic depth (``DropPath``,
the engine's drop-connect factors). Layer norm (``ops_norm.LayerNorm``, on the engine's group norm) and the
attention ops (``ops_attention``: Softmax, MatMul) are graph ops of their own files; windowed pooling is
``LayerOp`` of the engine's ``MaxPool2d`` and ``AvgPool2d``.

``backward(dy)`` returns one gradient per computed input (None where none is needed) and *writes*
``param.grad`` for its parameters, as a layer does.
"""

from __future__ import annotations

import math

import numpy as np

from models.activation import erfc
from models.param import Param
from models.pool import drop_path_scale

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)
NHWC_AXIS = (0, 3, 1, 2)  # an NCHW axis -> the NHWC axis


def to_onnx(a: np.ndarray) -> np.ndarray:
    return a.transpose(NHWC_TO_NCHW) if a.ndim == 4 else a


def from_onnx(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(NCHW_TO_NHWC)) if a.ndim == 4 else a


def const_to_engine(value: np.ndarray, out_rank: int) -> np.ndarray:
    """A constant operand broadcast against a tensor of ``out_rank``: to that tensor's engine layout."""
    value = np.asarray(value)
    if out_rank != 4 or value.ndim == 0:
        return value
    v = value.reshape((1,) * (4 - value.ndim) + value.shape)
    return np.ascontiguousarray(v.transpose(NCHW_TO_NHWC))


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` down to ``shape`` (numpy broadcasting in reverse)."""
    if g.shape == tuple(shape):
        return g
    g = g.sum(axis=tuple(range(g.ndim - len(shape)))) if g.ndim > len(shape) else g
    axes = tuple(i for i, (s, t) in enumerate(zip(shape, g.shape)) if s == 1 and t != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


class GraphOp:
    """One node. ``inputs``: the computed tensors it reads, in order; ``output``: the tensor it writes."""

    layer = None

    def __init__(self, name: str, inputs: list[str], output: str) -> None:
        self.name, self.inputs, self.output = name, list(inputs), output

    def params(self) -> list[Param]:
        return []

    def forward(self, xs: list[np.ndarray], training: bool) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy: np.ndarray) -> list[np.ndarray | None]:
        raise NotImplementedError


class LayerOp(GraphOp):
    """One engine layer. ``view``: the shape (batch first, ``None`` = the input's batch) that the
    layer's output is viewed as (GlobalAveragePool with keepdims: [N, C] -> [N, 1, 1, C]); ``as_rank4``:
    a rank-2 input [N, C] is viewed as [N, 1, 1, C] (BatchNormalization of a vector). Keeps the shapes."""

    def __init__(self, name, inputs, output, layer, view: tuple | None = None, as_rank4: bool = False) -> None:
        super().__init__(name, inputs, output)
        self.layer, self.view, self.as_rank4 = layer, view, as_rank4

    def params(self) -> list[Param]:
        return self.layer.params()

    def forward(self, xs, training):
        x = xs[0]
        self.x_shape = x.shape
        if self.as_rank4:
            x = x.reshape(x.shape[0], 1, 1, -1)
        y = self.layer.forward(x, training)
        self.y_shape = y.shape
        if self.view is not None:
            y = y.reshape((x.shape[0],) + tuple(self.view))
        elif self.as_rank4:
            y = y.reshape(self.x_shape)
        return y

    def backward(self, dy):
        dy = np.ascontiguousarray(dy).reshape(self.y_shape)
        dx = self.layer.backward(dy)
        return [None if dx is None else dx.reshape(self.x_shape)]


def _into(v: np.ndarray, rank: int, out_rank: int) -> np.ndarray:
    """A computed operand of ONNX rank ``rank`` (engine layout) as numpy broadcasts it into an output of
    ``out_rank``: a lower rank into an image batch (NHWC) gets its leading ones and the image's axis order; an
    image batch into another rank (MaxViT's attention bias, rank 4, added to rank-5 scores) is ONNX's NCHW again."""
    if out_rank == 4 and 0 < rank < 4:
        return v.reshape((1,) * (4 - rank) + v.shape).transpose(NCHW_TO_NHWC)
    if out_rank != 4 and rank == 4:
        return v.transpose(NHWC_TO_NCHW)
    return v


def _out_of(g: np.ndarray, rank: int, out_rank: int, shape: tuple) -> np.ndarray:
    """``_into`` in reverse for a gradient already summed to the operand's broadcast shape; ``shape``: the
    operand's own (engine layout)."""
    if out_rank == 4 and 0 < rank < 4:
        return g.transpose(NHWC_TO_NCHW).reshape(shape)
    if out_rank != 4 and rank == 4:
        return from_onnx(g)
    return g


class Binary(GraphOp):
    """Add, Sub, Mul or Div with numpy broadcasting. An operand is a computed tensor, a trainable
    ``Param`` (a non-scalar constant) or a fixed constant, the last two already in the output's engine layout;
    ``ranks``: the computed operands' ONNX ranks (``_into`` where one differs from the output's). Keeps both
    operands for Mul and Div."""

    def __init__(self, name, op: str, operands: list, output: str, ranks: list | None = None,
                 out_rank: int | None = None) -> None:
        super().__init__(name, [o for o in operands if isinstance(o, str)], output)
        self.op, self.operands = op, operands
        self.ranks, self.out_rank = ranks or [None] * len(operands), out_rank

    def params(self):
        return [o for o in self.operands if isinstance(o, Param)]

    def forward(self, xs, training):
        it = iter(xs)
        vals = [_into(next(it), r, self.out_rank) if isinstance(o, str) else o.data if isinstance(o, Param) else o
                for o, r in zip(self.operands, self.ranks)]
        self.own = [np.shape(x) for x in xs]
        a, b = vals
        self.a, self.b = (a, b) if self.op in ("Mul", "Div") else (None, None)
        self.shapes = [np.shape(a), np.shape(b)]
        if self.op == "Add":
            return a + b
        if self.op == "Sub":
            return a - b
        if self.op == "Mul":
            return a * b
        return a / b

    def backward(self, dy):
        a, b = self.a, self.b
        if self.op == "Add":
            grads = [dy, dy]
        elif self.op == "Sub":
            grads = [dy, -dy]
        elif self.op == "Mul":
            grads = [dy * b, dy * a]
        else:
            grads = [dy / b, -dy * a / (b * b)]
        out = []
        own = iter(self.own)
        for o, g, shape, rank in zip(self.operands, grads, self.shapes, self.ranks):
            if isinstance(o, Param):
                o.grad[...] = unbroadcast(g, shape)
            elif isinstance(o, str):
                out.append(_out_of(unbroadcast(g, shape), rank, self.out_rank, next(own)))
        return out


_GELU_C = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2/pi), as torch rounds it


class Unary(GraphOp):
    """Clip, Tanh, Exp, HardSigmoid, HardSwish or Gelu, element-wise. Keeps the input (Tanh and Exp their
    output; Gelu its Phi(x), exact, or tanh(u), approximate="tanh"). Clip passes the gradient strictly inside (min, max), as
    torch's ReLU6/hardtanh. Gelu is ONNX's (opset 20) and torch's: x * Phi(x) with Phi(x) = (1 + erf(x / sqrt 2))
    / 2 = erfc(-x / sqrt 2) / 2, or x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2; its erfc is
    ``models.activation.erfc`` (float64; exact where 1 + erf would cancel)."""

    def __init__(self, name, op: str, inputs, output, attrs: dict) -> None:
        super().__init__(name, inputs, output)
        self.op = op
        self.lo = attrs.get("min")
        self.hi = attrs.get("max")
        self.alpha = attrs.get("alpha", 0.2 if op == "HardSigmoid" else 1 / 6)
        self.slope = self.alpha  # HardSigmoid's derivative inside (0, 1)
        if op == "HardSigmoid" and abs(self.alpha - 1 / 6) < 1e-7:
            # torch's hardsigmoid (ONNX's alpha: float32's 1/6): its forward divides by 6, its backward multiplies
            # by float32's 1/6 (0.1666666716337204), in float64 too
            self.alpha, self.slope = 1 / 6, float(np.float32(1 / 6))
        self.beta = attrs.get("beta", 0.5)
        self.approximate = attrs.get("approximate", "none")

    def forward(self, xs, training):
        x = self.x = xs[0]
        if self.op == "Gelu":
            if self.approximate == "tanh":
                self.t = np.tanh(_GELU_C * (x + 0.044715 * (x * x * x))).astype(x.dtype)
                return (0.5 * x * (1 + self.t)).astype(x.dtype)
            self.phi = (0.5 * erfc(-x / math.sqrt(2.0))).astype(x.dtype)
            return x * self.phi
        if self.op == "Clip":
            lo = -np.inf if self.lo is None else self.lo
            hi = np.inf if self.hi is None else self.hi
            return np.minimum(np.maximum(x, lo), hi)
        if self.op in ("Tanh", "Exp"):
            self.y = np.tanh(x) if self.op == "Tanh" else np.exp(x)
            return self.y
        h = np.clip(self.alpha * x + self.beta, 0.0, 1.0)
        return h if self.op == "HardSigmoid" else x * h

    def backward(self, dy):
        x = self.x
        if self.op == "Clip":
            inside = np.ones(x.shape, bool)
            if self.lo is not None:
                inside &= x > self.lo
            if self.hi is not None:
                inside &= x < self.hi
            return [np.where(inside, dy, 0.0).astype(dy.dtype)]
        if self.op == "Tanh":
            return [dy * (1 - self.y * self.y)]
        if self.op == "Exp":
            return [dy * self.y]
        if self.op == "Gelu":
            if self.approximate == "tanh":  # d/dx: (1 + t) / 2 + x (1 - t^2) c (1 + 3 * 0.044715 x^2) / 2
                t = self.t
                return [(dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_C * (1 + 0.134145 * x * x)))
                        .astype(dy.dtype)]
            # d/dx: Phi(x) + x phi(x), phi the normal density
            return [(dy * (self.phi + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))).astype(dy.dtype)]
        z = self.alpha * x + self.beta
        inside = (z > 0) & (z < 1)
        if self.op == "HardSigmoid":
            return [np.where(inside, dy * self.slope, 0.0).astype(dy.dtype)]
        h = np.clip(z, 0.0, 1.0)
        return [dy * (h + np.where(inside, self.alpha * x, 0.0))]


class Move(GraphOp):
    """Flatten, Reshape, Squeeze, Unsqueeze, Transpose, Identity (and Dropout at ratio 0): data
    movement in ONNX's layout (a rank-4 tensor is transposed to NCHW first and back after). ``shape``: the
    ONNX output shape at the traced batch; ``src``, ``dst``: where the input and the output hold the batch
    (``batch_axes.BatchAxis``, None: no batch), so that the output's batch axis takes the actual batch (a batch
    size folded into a Reshape's shape, ``[tokens, N * heads, d]`` too, does not stay fixed). Keeps the input's
    shape."""

    def __init__(self, name, inputs, output, shape: tuple, perm: list | None = None, src=None, dst=None) -> None:
        super().__init__(name, inputs, output)
        self.shape, self.perm, self.src, self.dst = tuple(shape), perm, src, dst

    def forward(self, xs, training):
        x = xs[0]
        xo = to_onnx(x)
        self.xo_shape = xo.shape
        if self.perm is not None:
            return from_onnx(xo.transpose(self.perm))
        shape = list(self.shape)
        if self.dst is not None:
            batch = xo.shape[self.src.axis] // self.src.fold
            shape[self.dst.axis] = self.dst.outer * batch * self.dst.inner
        return from_onnx(xo.reshape(shape))

    def backward(self, dy):
        do = to_onnx(dy)
        if self.perm is not None:
            return [from_onnx(do.transpose(np.argsort(self.perm)))]
        return [from_onnx(do.reshape(self.xo_shape))]


class Concat(GraphOp):
    """Concat along an ONNX axis (the channel axis of NCHW is NHWC's last). Keeps the inputs' sizes."""

    def __init__(self, name, inputs, output, axis: int, rank: int) -> None:
        super().__init__(name, inputs, output)
        axis %= rank
        self.axis = NHWC_AXIS[axis] if rank == 4 else axis

    def forward(self, xs, training):
        self.sizes = [x.shape[self.axis] for x in xs]
        return np.concatenate(xs, axis=self.axis)

    def backward(self, dy):
        cuts = np.cumsum(self.sizes)[:-1]
        return [np.ascontiguousarray(g) for g in np.split(dy, cuts, axis=self.axis)]


class DropPath(GraphOp):
    """Stochastic depth (torch's ``StochasticDepth(p, "row")``, ``patterns.fuse_drop_path``): in training each
    sample is zeroed with probability ``p`` or scaled by 1/(1-p), with the engine's drop-connect factors
    (``models.pool.drop_path_scale``) from the model's generator, as ``models/mbconv.py`` draws them.
    Keeps the factors."""

    def __init__(self, name, inputs, output, p: float, rng, dtype) -> None:
        super().__init__(name, inputs, output)
        self.p, self.rng, self.dtype = float(p), rng, dtype

    def forward(self, xs, training):
        x = xs[0]
        self.scale = None
        if not training or self.p <= 0:
            return x
        self.scale = drop_path_scale(self.rng, x.shape[0], self.p, self.dtype).reshape((-1,) + (1,) * (x.ndim - 1))
        return x * self.scale

    def backward(self, dy):
        return [dy if self.scale is None else dy * self.scale]
