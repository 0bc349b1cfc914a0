"""Running one replica as a real pipeline: stages on their own IPUs, activation FIFOs between them.

The replica's model is cut at named blocks into stages. Operations run in the order the
schedule (``ipu/pipeline/schedule.py``) gives them, slot by slot; within a slot, stage by stage.

* FWD.m on stage s pops micro-batch m's input from the FIFO of stage s (stage 0 reads the
  infeed), stashes it (the stage input is all a stage keeps between its passes), runs
  ``model.forward_blocks`` over the stage's blocks and pushes the output to stage s + 1. The
  last stage computes the loss and pushes d(loss)/d(logits) to its own gradient FIFO.
* RECOMP.m re-runs the stage's forward from the stashed input, so that the layers' backward
  caches belong to micro-batch m again. It runs where the schedule says, and also whenever the
  caches were overwritten by a later forward (a CPU model has one cache per layer, an IPU stashes
  per micro-batch).
* BWD.m pops the gradient from the FIFO, runs ``model.backward_blocks`` and pushes the input
  gradient to stage s - 1; the parameter gradients are accumulated over micro-batches.

The model is used through its block contract only (``blocks``, ``block_params``,
``forward_blocks``, ``backward_blocks``, ``set_rng``), so the result equals running the
micro-batches one by one, unpipelined. Random masks: given ``rngs`` (one generator per
micro-batch), micro-batch m's forward draws its dropout and drop-connect masks from ``rngs[m]``
stage after stage, the draws one unpipelined forward of m makes from that generator, and each
recomputation replays its forward's draws from a snapshot taken before it. So a pipelined
replica draws the same masks as the single-IPU replica and equals it with stochastic layers on.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ipu.pipeline.schedule import StageOp, OpSchedule, build_schedule
from ipu.pipeline.split import check_gradient_accumulation

LossFn = Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]]  # (logits, labels) -> loss, dlogits
Accumulate = Callable[[list], None]  # called with a stage's params after each BWD; their .grad hold it


@dataclass
class PipelineResult:
    """One weight update's worth of pipelined work."""

    losses: list[float]  # per micro-batch, in micro-batch order
    grads: dict[str, np.ndarray]  # parameter name -> gradient summed over micro-batches (empty with ``accumulate``)
    trace: list[list[str]]  # per stage, the operations actually executed (RECOMP included)
    seconds: list[dict[str, float]]  # per stage, CPU seconds spent in "FWD", "RECOMP" and "BWD"


class PipelinedReplica:
    """A model split into stages at ``splits`` (first block of each later stage).

    ``device_mapping``: the IPU of each stage (default: stage s on IPU s); it shapes the schedule's
    timeline, not the results.
    """

    def __init__(self, model, splits: Sequence[str], schedule: str = "grouped", recompute: bool = True,
                 device_mapping: Sequence[int] = ()) -> None:
        names = model.blocks()
        unknown = [s for s in splits if s not in names]
        if unknown:
            raise ValueError(f"pipeline split {unknown[0]!r} is not a block of this model: choose from {names[1:]}")
        self.model = model
        self.bounds: list[tuple[str, str | None]] = list(zip([names[0], *splits], [*splits, None]))
        self.stage_params = [model.block_params(start, stop) for start, stop in self.bounds]
        self.schedule_kind = schedule
        self.recompute = recompute
        self.device_mapping = tuple(device_mapping)

    @property
    def num_stages(self) -> int:
        return len(self.bounds)

    def schedule(self, num_micro_batches: int) -> OpSchedule:
        """The schedule :meth:`run` follows for ``num_micro_batches`` micro-batches."""
        return build_schedule(self.schedule_kind, self.num_stages, num_micro_batches, self.recompute,
                              self.device_mapping)

    def run(self, micro_batches: Sequence[tuple[np.ndarray, np.ndarray]], loss_fn: LossFn, seed: int | None = None,
            rngs: Sequence[np.random.Generator] | None = None, accumulate: Accumulate | None = None) -> PipelineResult:
        """Forward and backward every micro-batch through the pipeline; accumulate gradients.

        ``rngs``: one generator per micro-batch for its dropout and drop-connect masks (module
        docstring); ``seed`` is shorthand for ``rngs = [default_rng((seed, m)) for each m]``; with
        neither the model's own generator is used and recomputation redraws the masks.
        ``accumulate(params)``: called after each backward with that stage's parameters, whose
        ``.grad`` hold the micro-batch's gradient (stages' backwards of one parameter come in
        micro-batch order); by default they are summed into ``PipelineResult.grads``.
        """
        check_gradient_accumulation(len(micro_batches), self.num_stages)
        if seed is not None and rngs is None:
            rngs = [np.random.default_rng((seed, m)) for m in range(len(micro_batches))]
        if rngs is not None and len(rngs) != len(micro_batches):
            raise ValueError(f"{len(rngs)} generators for {len(micro_batches)} micro-batches: give one per micro-batch")
        state = _RunState(self.num_stages, len(micro_batches), rngs)
        if accumulate is None:
            state.grads = {p.name: np.zeros_like(p.data) for p in self.model.params()}
            accumulate = state.add_grads
        state.act_fifo[0].extend(x for x, _ in micro_batches)
        for op in _in_execution_order(self.schedule(len(micro_batches))):
            start = time.perf_counter()
            if op.kind == "FWD":
                self._forward(op, state, micro_batches[op.micro_batch][1], loss_fn)
            elif op.kind == "RECOMP":
                self._recompute(op, state)
            else:
                self._backward(op, state, accumulate)
            seconds = state.seconds[op.stage]
            seconds[op.kind] = seconds.get(op.kind, 0.0) + time.perf_counter() - start
        return PipelineResult(state.losses, state.grads, state.trace, state.seconds)

    def _forward(self, op: StageOp, state: _RunState, labels: np.ndarray, loss_fn: LossFn) -> None:
        s, m = op.stage, op.micro_batch
        x = state.act_fifo[s].popleft()
        state.stash[s][m] = x
        if state.rngs is not None:  # this forward continues micro-batch m's stream; remember where
            state.rng_at[(s, m)] = state.rngs[m].bit_generator.state
            self.model.set_rng(state.rngs[m])
        y = self.model.forward_blocks(x, *self.bounds[s], training=True).copy()
        state.cached = (s, m)
        state.trace[s].append(op.label)
        if s == self.num_stages - 1:
            state.losses[m], dlogits = loss_fn(y, labels)
            state.grad_fifo[s].append(np.array(dlogits, copy=True))
        else:
            state.act_fifo[s + 1].append(y)

    def _recompute(self, op: StageOp, state: _RunState) -> None:
        s, m = op.stage, op.micro_batch
        if state.rngs is not None:  # replay the forward's draws from the state they started at
            state.replay.bit_generator.state = state.rng_at[(s, m)]
            self.model.set_rng(state.replay)
        self.model.forward_blocks(state.stash[s][m], *self.bounds[s], training=True)
        state.cached = (s, m)
        state.trace[s].append(f"RECOMP.{m + 1}")

    def _backward(self, op: StageOp, state: _RunState, accumulate: Accumulate) -> None:
        s, m = op.stage, op.micro_batch
        if state.cached != (s, m):  # the layer caches hold another micro-batch: recompute first
            self._recompute(op, state)
        dy = state.grad_fifo[s].popleft()
        params = self.stage_params[s]
        for p in params:
            p.grad[...] = 0.0
        dx = self.model.backward_blocks(dy, *self.bounds[s], need_dx=s > 0)
        state.cached = None
        accumulate(params)
        del state.stash[s][m]
        state.rng_at.pop((s, m), None)
        state.trace[s].append(op.label)
        if s > 0:
            state.grad_fifo[s - 1].append(np.array(dx, copy=True))


class _RunState:
    """FIFOs, stashes, generators and accumulators of one ``run``."""

    def __init__(self, num_stages: int, num_micro_batches: int, rngs: Sequence[np.random.Generator] | None) -> None:
        self.act_fifo: list[deque[np.ndarray]] = [deque() for _ in range(num_stages)]
        self.grad_fifo: list[deque[np.ndarray]] = [deque() for _ in range(num_stages)]
        self.stash: list[dict[int, np.ndarray]] = [{} for _ in range(num_stages)]
        self.grads: dict[str, np.ndarray] = {}
        self.losses = [0.0] * num_micro_batches
        self.trace: list[list[str]] = [[] for _ in range(num_stages)]
        self.seconds: list[dict[str, float]] = [{} for _ in range(num_stages)]
        self.cached: tuple[int, int] | None = None
        self.rngs = rngs
        self.rng_at: dict[tuple[int, int], dict] = {}  # (stage, m) -> its generator's state before its forward
        self.replay = np.random.Generator(type(rngs[0].bit_generator)(0)) if rngs else None

    def add_grads(self, params: list) -> None:
        for p in params:
            self.grads[p.name] += p.grad


def _in_execution_order(schedule: OpSchedule) -> list[StageOp]:
    """Slot by slot; within a slot stage by stage, each stage's ops in its own order."""
    ops = [op for stage_ops in schedule.ops for op in stage_ops]
    position = {id(op): i for stage_ops in schedule.ops for i, op in enumerate(stage_ops)}
    return sorted(ops, key=lambda op: (op.slot, op.stage, position[id(op)]))
