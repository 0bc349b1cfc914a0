"""A model is a list of named blocks run in order; the names are pipeline split points.

Public contract (used by ``ipu/`` and ``launch/``): ``params``, ``block_params``, ``buffers``, ``forward``,
``backward``, ``forward_blocks``/``backward_blocks``, ``state_dict``/``load_state_dict`` (torch
layout and key names), ``profile``, ``blocks``, ``set_rng``.
"""

from __future__ import annotations

import numpy as np

from models.layer import GradPool, Layer, Rng, release_consumed
from models.param import Param, pack_grads
from models.profile import LayerProfile


class Model:
    def __init__(self, name: str, blocks: list[tuple[str, Layer]], input_shape: tuple[int, int, int],
                 rng: Rng, dtype=np.float32, config=None) -> None:
        self.name, self.config, self.dtype = name, config, np.dtype(dtype)
        self.input_shape = input_shape  # (H, W, C) used by profile()
        self._names = [n for n, _ in blocks]
        self._blocks = [b for _, b in blocks]
        self._rng = rng
        self._input: np.ndarray | None = None
        self._pool = GradPool()  # backward's gradient buffers, shared by all layers
        self._last_dx: np.ndarray | None = None
        for b in self._blocks:
            b.set_grad_pool(self._pool)
        self._params = [p for b in self._blocks for p in b.params()]
        self._check_unique()
        pack_grads(self._params)  # one buffer: partials are summed and copied in one operation

    def _check_unique(self) -> None:
        keys = [p.name for p in self._params] + list(self.buffers())
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"model {self.name}: duplicate state_dict keys {sorted(dup)}")

    # -- structure -----------------------------------------------------------------------
    def blocks(self) -> list[str]:
        return list(self._names)

    def params(self) -> list[Param]:
        return list(self._params)

    def block_params(self, start: int | str = 0, stop: int | str | None = None) -> list[Param]:
        """The parameters of blocks ``[start, stop)`` (indices or names), in order."""
        return [p for i in self._range(start, stop) for p in self._blocks[i].params()]

    def buffers(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for b in self._blocks:
            out.update(b.buffers())
        return out

    def set_rng(self, gen: np.random.Generator) -> None:
        """The generator that dropout and drop-connect draw from."""
        self._rng.gen = gen

    def _index(self, at: int | str, what: str) -> int:
        if isinstance(at, str):
            if at not in self._names:
                raise ValueError(f"model {self.name}: {what} block {at!r} unknown; blocks are {self._names}")
            return self._names.index(at)
        if not 0 <= at <= len(self._names):
            raise ValueError(f"model {self.name}: {what} block index {at} outside [0, {len(self._names)}]")
        return at

    def _range(self, start, stop) -> range:
        i = self._index(start, "start")
        j = len(self._names) if stop is None else self._index(stop, "stop")
        if i >= j:
            raise ValueError(f"model {self.name}: empty block range [{start}, {stop})")
        return range(i, j)

    # -- computation ---------------------------------------------------------------------
    def forward_blocks(self, x: np.ndarray, start: int | str = 0, stop: int | str | None = None,
                       training: bool = True) -> np.ndarray:
        """Run blocks ``[start, stop)`` (indices or names). The input is copied into a model-owned
        buffer, so the caller may reuse its array; the result is valid until the next call."""
        r = self._range(start, stop)
        if self._input is None or self._input.shape != x.shape:
            self._input = np.empty(x.shape, self.dtype)
        np.copyto(self._input, x, casting="same_kind" if x.dtype.kind == "f" else "unsafe")
        y = self._input
        for i in r:
            y = self._blocks[i].forward(y, training)
        return y

    def backward_blocks(self, dy: np.ndarray, start: int | str = 0, stop: int | str | None = None,
                        need_dx: bool = True) -> np.ndarray | None:
        """Backward through blocks ``[start, stop)`` after the matching ``forward_blocks``; writes
        every ``param.grad`` in the range and returns the gradient of the range's input."""
        r = self._range(start, stop)
        first = _first_layer(self._blocks[r[0]])
        if hasattr(first, "need_dx"):
            first.need_dx = need_dx
        dy = np.ascontiguousarray(dy, dtype=self.dtype)
        # The previous call's result is ours: recycle it now, or, when the caller hands it back
        # as this call's input (pipeline stages on one model), once it has been consumed.
        prev, self._last_dx = self._last_dx, None
        if prev is not None and not np.may_share_memory(prev, dy):
            self._pool.give(prev)
            prev = None
        start_dy = dy
        for i in reversed(r):
            block = self._blocks[i]
            # a gradient between blocks is ours alone: the block may write its own over it
            own = not np.may_share_memory(dy, start_dy)
            out = block.backward_consuming(dy) if own else block.backward(dy)
            if dy is not start_dy:
                release_consumed(self._pool, dy, out)
            dy = out
        if prev is not None:
            release_consumed(self._pool, prev, dy)
        if hasattr(first, "need_dx"):
            first.need_dx = True
        self._last_dx = dy
        return dy if need_dx else None

    def forward(self, x: np.ndarray, training: bool) -> np.ndarray:
        """Logits (a fresh array) for an NHWC batch."""
        if x.ndim != 4 or x.shape[3] != self.input_shape[2]:
            raise ValueError(f"model {self.name}: expected NHWC input [N, H, W, {self.input_shape[2]}], "
                             f"got {x.shape}")
        return self.forward_blocks(x, 0, None, training).copy()

    def backward(self, dlogits: np.ndarray, need_dx: bool = True) -> np.ndarray | None:
        return self.backward_blocks(dlogits, 0, None, need_dx)

    # -- state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of all parameters and buffers under torchvision's keys (OIHW conv weights)."""
        out = {p.name: p.data.copy() for p in self._params}
        out.update({k: v.copy() for k, v in self.buffers().items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray], strict: bool = True) -> None:
        """Copy values in; with ``strict`` every key must match. Shapes must always match."""
        targets = {p.name: p.data for p in self._params}
        targets.update(self.buffers())
        missing = sorted(set(targets) - set(state))
        unexpected = sorted(set(state) - set(targets))
        if strict and (missing or unexpected):
            raise KeyError(f"model {self.name}: state_dict mismatch; missing keys {missing[:10]}"
                           f"{' ...' if len(missing) > 10 else ''}, unexpected keys {unexpected[:10]}"
                           f"{' ...' if len(unexpected) > 10 else ''}")
        for key, dst in targets.items():
            if key not in state:
                continue
            src = np.asarray(state[key])
            if src.shape != dst.shape:
                raise ValueError(f"model {self.name}: {key!r} has shape {tuple(src.shape)} in the state_dict "
                                 f"but {tuple(dst.shape)} in the model")
            np.copyto(dst, src, casting="unsafe")

    # -- cost model ----------------------------------------------------------------------
    def profile(self, batch_size: int) -> list[LayerProfile]:
        """Per-layer counts at the configured input size, ending with the loss."""
        shape = (batch_size, *self.input_shape)
        out: list[LayerProfile] = []
        for b in self._blocks:
            out.extend(b.profile(shape))
            shape = b.out_shape(shape)
        e = int(np.prod(shape))
        out.append(LayerProfile("loss", self._names[-1], "loss", 6 * e, 3 * e, 0, batch_size, e, False))
        return out


def _first_layer(layer: Layer) -> Layer:
    while hasattr(layer, "layers"):
        layer = layer.layers[0]
    return layer
