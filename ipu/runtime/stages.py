"""Pipeline stages written by users: stage functions or layer sequences, traced into model blocks.

A *stage function* takes the activation the previous stage returned (stage 1: the normalised
images from the infeed) and returns its own, calling the layer functions below, as a
TensorFlow pipeline stage calls Keras layers::

    def stage1(x):
        x = flatten(x)
        x = dense(x, 256, activation="relu")
        return dropout(x, 0.2)

It is called once, at compile time, on a symbolic :class:`TracedTensor` that carries only a
per-sample shape; each layer function builds a ``models/`` layer (``Dense``, ``Conv2d``,
``Activation``, ``Dropout``, ...) sized from that shape and records it. A stage can also be
given as a ``models`` ``Layer`` or a list of them (a *layer sequence*). Stage k becomes the
model block ``stage<k>`` (1-based), whose parameters are named ``stage<k>.<i>.weight`` and so
on, so the same stages compile to the same parameters whether pipelined or not.

Stages are chains: every layer takes the previous layer's output. Branches (residual blocks)
belong inside one ``models`` layer, e.g. ``MBConv``, passed with :func:`layer`.

The loss is traced the same way: ``optimizer_function(logits, labels)`` receives symbolic
tensors and returns ``cross_entropy(logits, labels)`` (or any :class:`Loss`), which the runtime
evaluates per micro-batch on the last stage's output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.activation import Activation
from models.conv import Conv2d
from models.dense import Dense
from models.dense_net import Flatten
from models.layer import Layer, Rng, Sequential
from models.loss import softmax_cross_entropy
from models.model import Model
from models.pool import Dropout, GlobalAvgPool

StageLike = Callable[["TracedTensor"], "TracedTensor"] | Layer | Sequence[Layer]


class _Stage:
    """The layers one stage function has recorded so far."""

    def __init__(self, block: str, rng_holder: Rng, init: np.random.Generator, dtype) -> None:
        self.block, self.rng_holder, self.init, self.dtype = block, rng_holder, init, np.dtype(dtype)
        self.layers: list[Layer] = []
        self.current: TracedTensor | None = None

    def next_name(self) -> str:
        return f"{self.block}.{len(self.layers)}"

    def add(self, x: TracedTensor, layer: Layer) -> TracedTensor:
        if x.stage is not self:
            raise ValueError(f"{self.block}: a layer got a tensor of {x.stage.block}; stages exchange exactly one "
                             "tensor: the one the previous stage returned")
        if x is not self.current:
            raise ValueError(f"{self.block}: each layer must take the previous layer's output (stages are chains); "
                             "put branches inside one models/ layer (e.g. MBConv) and add it with layer(x, ...)")
        _join_block(layer, self.block)
        self.layers.append(layer)
        self.current = TracedTensor(tuple(layer.out_shape((1, *x.shape))[1:]), self)
        return self.current


@dataclass(frozen=True, eq=False)
class TracedTensor:
    """A symbolic activation while stages are traced: its per-sample ``shape`` (no batch axis)."""

    shape: tuple[int, ...]
    stage: _Stage | None = None  # None: an input of optimizer_function
    role: str = "activation"  # or "logits" / "labels" (optimizer_function's inputs)


@dataclass(frozen=True)
class Loss:
    """A loss the runtime evaluates per micro-batch: ``fn(logits, labels) -> (mean loss, d loss/d logits)``."""

    fn: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]]
    name: str = "loss"


# -- layer functions --------------------------------------------------------------------------
def dense(x: TracedTensor, units: int, activation: str | None = None, bias: bool = True) -> TracedTensor:
    """A fully connected layer on a flat input ``[D]`` (``flatten`` images first), then ``activation``."""
    if len(x.shape) != 1:
        raise ValueError(f"dense needs a flat input [features], got per-sample shape {x.shape}: call flatten(x) first")
    s = _stage_of(x)
    y = s.add(x, Dense(s.next_name(), s.block, x.shape[0], int(units), bias, s.dtype, s.init))
    return _activate(y, activation)


def conv2d(x: TracedTensor, filters: int, kernel_size: int, strides: int = 1, padding: str = "same",
           activation: str | None = None, bias: bool = True) -> TracedTensor:
    """A 2-D convolution of an NHWC input ``[H, W, C]`` (``padding`` "same" or "symmetric"), then ``activation``."""
    if len(x.shape) != 3:
        raise ValueError(f"conv2d needs an image input [H, W, C], got per-sample shape {x.shape}")
    s = _stage_of(x)
    conv = Conv2d(s.next_name(), s.block, x.shape[2], int(filters), kernel_size, strides, padding, 1, bias,
                  s.dtype, s.init)
    return _activate(s.add(x, conv), activation)


def flatten(x: TracedTensor) -> TracedTensor:
    """``[H, W, C]`` -> ``[H * W * C]``."""
    s = _stage_of(x)
    return s.add(x, Flatten(s.next_name(), s.block, s.dtype))


def activation(x: TracedTensor, fn: str) -> TracedTensor:
    """An element-wise ``relu``, ``silu`` or ``sigmoid``."""
    s = _stage_of(x)
    return s.add(x, Activation(s.next_name(), s.block, fn, s.dtype))


def relu(x: TracedTensor) -> TracedTensor:
    return activation(x, "relu")


def dropout(x: TracedTensor, rate: float) -> TracedTensor:
    """Inverted dropout with probability ``rate`` (training only); the masks follow the replica's streams."""
    s = _stage_of(x)
    return s.add(x, Dropout(s.next_name(), s.block, rate, s.rng_holder, s.dtype))


def global_average_pool(x: TracedTensor) -> TracedTensor:
    """``[H, W, C]`` -> ``[C]``, the mean over H and W."""
    s = _stage_of(x)
    return s.add(x, GlobalAvgPool(s.next_name(), s.block, s.dtype))


def layer(x: TracedTensor, built: Layer) -> TracedTensor:
    """Any ``models`` layer built by the caller (it joins the stage's block; its names must be unique)."""
    if not isinstance(built, Layer):
        raise TypeError(f"layer() takes a models.layer.Layer, got {type(built).__name__}")
    return _stage_of(x).add(x, built)


def cross_entropy(logits: TracedTensor, labels: TracedTensor, label_smoothing: float = 0.0) -> Loss:
    """Softmax cross-entropy of ``logits [classes]`` against integer ``labels``, as a :class:`Loss`."""
    if not isinstance(logits, TracedTensor) or logits.role != "logits" or len(logits.shape) != 1:
        raise ValueError(f"cross_entropy needs the logits [classes] optimizer_function receives (the last stage's "
                         f"output), got {getattr(logits, 'shape', type(logits).__name__)}")
    if not isinstance(labels, TracedTensor) or labels.role != "labels":
        raise ValueError("cross_entropy's second argument must be the labels optimizer_function receives")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    return Loss(functools.partial(softmax_cross_entropy, label_smoothing=label_smoothing), "cross_entropy")


def _activate(x: TracedTensor, fn: str | None) -> TracedTensor:
    return x if fn is None else activation(x, fn)


def _stage_of(x: TracedTensor) -> _Stage:
    if not isinstance(x, TracedTensor):
        raise TypeError(f"layer functions take the stage's input tensor, got {type(x).__name__}; "
                        "they run once at compile time, not on arrays")
    if x.stage is None:
        raise ValueError(f"the {x.role} that optimizer_function receives cannot go through layers: put every "
                         "layer in a stage")
    return x.stage


def _join_block(built: Layer, block: str) -> None:
    """Profile rows carry ``layer.block``: a user's layer (and its children) join the stage's block."""
    built.block = block
    for child in built.children():
        _join_block(child, block)


# -- tracing ----------------------------------------------------------------------------------
@dataclass
class TracedStages:
    """The model the stages compiled to and the shape of the last stage's output."""

    model: Model
    output_shape: tuple[int, ...]

    @property
    def block_names(self) -> list[str]:
        return self.model.blocks()


def trace_stages(stages: Sequence[StageLike], input_shape: tuple[int, ...], seed: int = 0,
                 dtype=np.float32, name: str = "pipeline") -> TracedStages:
    """Build the model of ``stages`` (functions or layer sequences) for samples of ``input_shape``.

    Weights are initialised from ``default_rng(seed)``, stage after stage, layer after layer.
    """
    if isinstance(stages, (Layer, str)) or not isinstance(stages, Sequence) or not stages:
        raise ValueError("computational_stages must be a non-empty list of stage functions or layer sequences")
    rng_holder, init = Rng(), np.random.default_rng(seed)
    shape = tuple(int(d) for d in input_shape)
    blocks = []
    for k, stage in enumerate(stages, start=1):
        traced = _Stage(f"stage{k}", rng_holder, init, dtype)
        traced.current = TracedTensor(shape, traced)
        if callable(stage) and not isinstance(stage, Layer):
            out = stage(traced.current)
            if not isinstance(out, TracedTensor) or out.stage is not traced:
                raise ValueError(f"stage {k} ({getattr(stage, '__name__', stage)}) must return the tensor its last "
                                 f"layer made, got {type(out).__name__}")
            if out is not traced.current:
                raise ValueError(f"stage {k} must return its last layer's output")
        else:
            for built in _layer_list(stage, k):
                layer(traced.current, built)
        if not traced.layers:
            raise ValueError(f"stage {k} has no layers: every pipeline stage must compute something")
        blocks.append((traced.block, Sequential("", traced.block, traced.layers, dtype)))
        shape = traced.current.shape
    return TracedStages(Model(name, blocks, tuple(int(d) for d in input_shape), rng_holder, dtype), shape)


def trace_loss(optimizer_function: Callable, output_shape: tuple[int, ...]):
    """Call ``optimizer_function`` once on symbolic logits and labels; return what it returned."""
    return optimizer_function(TracedTensor(tuple(output_shape), None, "logits"), TracedTensor((), None, "labels"))


def _layer_list(stage, k: int) -> list[Layer]:
    layers = [stage] if isinstance(stage, Layer) else list(stage)
    bad = [type(x).__name__ for x in layers if not isinstance(x, Layer)]
    if bad:
        raise TypeError(f"stage {k}: a layer sequence holds models layers only, got {bad[0]}; "
                        "or give a stage function")
    return layers

