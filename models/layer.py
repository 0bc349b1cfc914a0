"""The layer protocol shared by every building block, and a sequential container.

A layer is an object with ``forward(x, training) -> y`` and ``backward(dy) -> dx`` side by
side. ``forward`` keeps what ``backward`` needs (each layer's docstring says what), and
``backward`` *writes* ``param.grad`` for its parameters. Arrays are NHWC.

Buffers are reused across steps: a layer writes its output (and its ``dx``) into arrays it
owns, keyed by shape, so once warm a training step allocates nothing large. The price is
that a returned array is valid only until the same layer runs again: copy what you keep.
One forward may be in flight per layer: call ``backward`` before the next training forward.

A caller that no longer needs ``dy`` once the layer has consumed it calls
``backward_consuming(dy)`` instead: the layer may then write its ``dx`` over ``dy`` (norms and
squeeze-and-excitation do when the shapes match), so one gradient buffer fewer is alive.
Containers pass this on only where they own the gradient (``Sequential``: every gradient
between its layers, and its input's when it was itself called consuming). Likewise a layer whose
input is the private output of the layer before it (``output_private``; ``Sequential`` marks it
with ``mark_input_expendable``) may write its ``dx`` over that input once it has read it: the
convolutions do, after their weight gradient.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from models.param import Param
from models.profile import ConvShape, LayerProfile

Shape = tuple[int, ...]
_arena = threading.local()  # per-thread temporaries shared by all layers (see Layer._temp)


class Rng:
    """A shared, replaceable holder for the generator that dropout and drop-connect draw from."""

    def __init__(self, gen: np.random.Generator | None = None) -> None:
        self.gen = gen if gen is not None else np.random.default_rng(0)


class GradPool:
    """Free gradient buffers shared by one model's layers, reused across shapes.

    During backward only a few gradients are alive at once (the one being consumed, the one
    being produced, and a residual branch's), so a layer *takes* its ``dx`` buffer here and the
    container *gives* it back once the layer below has consumed it. A request is served by the
    smallest free buffer that is large enough (viewed with the requested shape and dtype), so
    the pool holds about as many bytes as the largest gradients alive at once, not one buffer
    per distinct shape. Only buffers this pool created are ever taken back; after the first
    step the same requests meet the same buffers, so nothing grows.
    """

    def __init__(self) -> None:
        self._free: dict[int, list[np.ndarray]] = {}  # flat uint8 buffers by size in bytes
        self._owned: set[int] = set()

    def take(self, shape: Shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        fits = [size for size, free in self._free.items() if size >= nbytes and free]
        if fits:
            buf = self._free[min(fits)].pop()
        else:
            buf = np.empty(nbytes, np.uint8)
            self._owned.add(id(buf))
        return buf[:nbytes].view(dtype).reshape(shape)

    def give(self, arr: np.ndarray | None) -> None:
        while arr is not None and arr.base is not None and isinstance(arr.base, np.ndarray):
            arr = arr.base
        if arr is not None and id(arr) in self._owned:
            free = self._free.setdefault(arr.nbytes, [])
            if not any(a is arr for a in free):
                free.append(arr)


def release_consumed(pool: GradPool | None, consumed: np.ndarray | None, produced: np.ndarray | None) -> None:
    """Give ``consumed`` back unless ``produced`` is (a view of) it."""
    if pool is None or consumed is None:
        return
    if produced is not None and (produced is consumed or np.may_share_memory(produced, consumed)):
        return
    pool.give(consumed)


class Layer:
    """Base class: parameter/buffer listing, scratch buffers and profile plumbing.

    name: the parameter prefix in the state_dict (``features.1.0.block.1.0``).
    block: the named block it belongs to (``stem``, ``block1a``, ..., ``head``).
    """

    kind = "act"
    # True for a layer whose output is an array of its own that its backward never reads: once
    # the layer after it has its weight gradient, that input is dead (see mark_input_expendable)
    output_private = False

    def __init__(self, name: str, block: str, dtype=np.float32) -> None:
        self.name = name
        self.block = block
        self.dtype = np.dtype(dtype)
        self._scratch: dict[str, np.ndarray] = {}
        self.grad_pool: GradPool | None = None
        self.input_expendable = False

    def mark_input_expendable(self, expendable: bool) -> None:
        """Set by a container when this layer's input is the private output of the layer before it
        (``output_private``) and read by nothing else: backward may then write its ``dx`` over the
        input once it no longer needs it (a convolution does, after its weight gradient), so a
        model holds one gradient buffer fewer of that size (B0-224: the pool's largest, 147 MiB)."""
        self.input_expendable = expendable

    def set_grad_pool(self, pool: GradPool | None) -> None:
        self.grad_pool = pool
        for child in self.children():
            child.set_grad_pool(pool)

    def children(self) -> list["Layer"]:
        return []

    # -- parameters and state ------------------------------------------------------------
    def params(self) -> list[Param]:
        return []

    def buffers(self) -> dict[str, np.ndarray]:
        return {}

    def _key(self, suffix: str) -> str:
        return f"{self.name}.{suffix}" if self.name else suffix

    def _grad_buf(self, shape: Shape, over: np.ndarray | None = None) -> np.ndarray:
        """The buffer for this layer's input gradient: from the model's pool when there is one.
        ``over``: a ``dy`` the caller no longer needs (``backward_consuming``), used itself when
        it can be (a model's layer, same shape and dtype, C-contiguous, writeable)."""
        if (over is not None and self.grad_pool is not None and over.shape == tuple(shape)
                and over.dtype == self.dtype and over.flags.c_contiguous and over.flags.writeable):
            return over
        if self.grad_pool is None:
            return self._buf("dx", shape)
        return self.grad_pool.take(shape, self.dtype)

    def _buf(self, key: str, shape: Shape, dtype=None) -> np.ndarray:
        """A scratch array owned by this layer, reallocated only when the shape changes."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        arr = self._scratch.get(key)
        if arr is None or arr.shape != tuple(shape) or arr.dtype != dtype:
            arr = np.empty(shape, dtype=dtype)
            self._scratch[key] = arr
        return arr

    def _temp(self, slot: str, shape: Shape, dtype=None) -> np.ndarray:
        """A temporary shared by every layer on this thread, valid only until the next request
        for the same ``slot``: for scratch used within one call (weight copies, partial sums),
        never for what backward needs. Its memory is the largest request, not one per layer."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        bufs = _arena.__dict__.setdefault("bufs", {})
        buf = bufs.get(slot)
        if buf is None or buf.nbytes < nbytes:
            buf = bufs[slot] = np.empty(nbytes, np.uint8)
        return buf[:nbytes].view(dtype).reshape(shape)

    # -- computation ---------------------------------------------------------------------
    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dy: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def backward_consuming(self, dy: np.ndarray) -> np.ndarray:
        """``backward`` for a caller that no longer needs ``dy``: the layer may write ``dx`` over it."""
        return self.backward(dy)

    # -- cost model ----------------------------------------------------------------------
    def out_shape(self, shape: Shape) -> Shape:
        return shape

    def profile(self, shape: Shape) -> list[LayerProfile]:
        """Per-layer counts for an input of ``shape`` (batch first)."""
        return []

    def _record(self, shape: Shape, flops_fwd: int, flops_bwd: int, saved: int,
                kind: str | None = None, matmul: bool = False, own_params: bool = True,
                conv: ConvShape | None = None) -> LayerProfile:
        """One profile row; ``own_params=False`` for extra rows (fused activation, residual add)."""
        out = self.out_shape(shape)
        return LayerProfile(
            name=self.name, block=self.block, kind=kind or self.kind,
            flops_fwd=int(flops_fwd), flops_bwd=int(flops_bwd),
            params=int(sum(p.data.size for p in self.params())) if own_params else 0,
            activation_elems=int(np.prod(out)), saved_elems=int(saved), matmul=matmul,
            in_shape=tuple(int(d) for d in shape), conv=conv)


class ConsumesGradient:
    """Mixin for a layer whose ``_backward(dy, consume)`` serves ``backward`` (consume=False) and
    ``backward_consuming`` (True); put it before ``Layer`` in the bases."""

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return self._backward(dy, False)

    def backward_consuming(self, dy: np.ndarray) -> np.ndarray:
        return self._backward(dy, True)


class Sequential(ConsumesGradient, Layer):
    """Layers run one after another; backward runs them in reverse."""

    def __init__(self, name: str, block: str, layers: list[Layer], dtype=np.float32) -> None:
        super().__init__(name, block, dtype)
        self.layers = layers
        for before, layer in zip(layers, layers[1:]):  # each input between two layers is read by one layer
            layer.mark_input_expendable(before.output_private)

    @property
    def output_private(self) -> bool:
        return bool(self.layers) and self.layers[-1].output_private

    def mark_input_expendable(self, expendable: bool) -> None:
        super().mark_input_expendable(expendable)
        if self.layers:
            self.layers[0].mark_input_expendable(expendable)

    def children(self) -> list[Layer]:
        return list(self.layers)

    def params(self) -> list[Param]:
        return [p for layer in self.layers for p in layer.params()]

    def buffers(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for layer in self.layers:
            out.update(layer.buffers())
        return out

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        for layer in self.layers:
            x = layer.forward(x, training)
        return x

    def _backward(self, dy: np.ndarray, consume_first: bool) -> np.ndarray:
        first = dy
        for layer in reversed(self.layers):
            if consume_first or not np.may_share_memory(dy, first):  # ours: a layer may overwrite it
                out = layer.backward_consuming(dy)
            else:
                out = layer.backward(dy)
            if dy is not first:  # an intermediate gradient, consumed: back to the pool
                release_consumed(self.grad_pool, dy, out)
            dy = out
        return dy

    def out_shape(self, shape: Shape) -> Shape:
        for layer in self.layers:
            shape = layer.out_shape(shape)
        return shape

    def profile(self, shape: Shape) -> list[LayerProfile]:
        out: list[LayerProfile] = []
        for layer in self.layers:
            out.extend(layer.profile(shape))
            shape = layer.out_shape(shape)
        return out
