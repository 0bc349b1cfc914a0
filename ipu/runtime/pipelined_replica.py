"""Running one replica as a real pipeline: stages on their own IPUs, activation FIFOs between them.

The replica's model is cut at named blocks into stages. Operations run in the order the
schedule (``ipu/schedule.py``) gives them, slot by slot; within a slot, stage by stage.

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

The model is used through its block contract only (``blocks``, ``params``, ``forward_blocks``,
``backward_blocks``, ``set_rng``), so the result equals running the micro-batches one by one,
unpipelined. With ``seed`` given, every forward of (stage, micro-batch) and its recomputation
draw dropout and drop-connect masks from the same generator, ``default_rng((seed, stage, m))``,
so recomputation reproduces the forward exactly even with stochastic layers on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ipu.pipeline import check_gradient_accumulation
from ipu.schedule import Op, Schedule, build_schedule

LossFn = Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]]  # (logits, labels) -> loss, dlogits


@dataclass
class PipelineResult:
    """One weight update's worth of pipelined work."""

    losses: list[float]  # per micro-batch, in micro-batch order
    grads: dict[str, np.ndarray]  # parameter name -> gradient summed over micro-batches
    trace: list[list[str]]  # per IPU, the operations actually executed (RECOMP included)


class PipelinedReplica:
    """A model split into stages at ``splits`` (first block of each later stage)."""

    def __init__(self, model, splits: Sequence[str], schedule: str = "grouped", recompute: bool = True) -> None:
        names = model.blocks()
        unknown = [s for s in splits if s not in names]
        if unknown:
            raise ValueError(f"pipeline split {unknown[0]!r} is not a block of this model: choose from {names[1:]}")
        self.model = model
        self.bounds: list[tuple[str, str | None]] = list(zip([names[0], *splits], [*splits, None]))
        self.schedule_kind = schedule
        self.recompute = recompute

    @property
    def num_stages(self) -> int:
        return len(self.bounds)

    def run(
        self, micro_batches: Sequence[tuple[np.ndarray, np.ndarray]], loss_fn: LossFn, seed: int | None = None
    ) -> PipelineResult:
        """Forward and backward every micro-batch through the pipeline; accumulate gradients."""
        check_gradient_accumulation(len(micro_batches), self.num_stages)
        schedule = build_schedule(self.schedule_kind, self.num_stages, len(micro_batches), self.recompute)
        state = _RunState(self.num_stages, self.model.params(), len(micro_batches))
        state.seed = seed
        state.act_fifo[0].extend(x for x, _ in micro_batches)
        for op in _in_execution_order(schedule):
            if op.kind == "FWD":
                self._forward(op, state, micro_batches[op.micro_batch][1], loss_fn)
            elif op.kind == "RECOMP":
                self._recompute(op, state)
            else:
                self._backward(op, state)
        return PipelineResult(state.losses, state.grads, state.trace)

    def _forward(self, op: Op, state: _RunState, labels: np.ndarray, loss_fn: LossFn) -> None:
        s, m = op.stage, op.micro_batch
        x = state.act_fifo[s].popleft()
        state.stash[s][m] = x
        self._seed_masks(state, s, m)
        y = self.model.forward_blocks(x, *self.bounds[s], training=True).copy()
        state.cached = (s, m)
        state.trace[s].append(op.label)
        if s == self.num_stages - 1:
            state.losses[m], dlogits = loss_fn(y, labels)
            state.grad_fifo[s].append(np.array(dlogits, copy=True))
        else:
            state.act_fifo[s + 1].append(y)

    def _recompute(self, op: Op, state: _RunState) -> None:
        s, m = op.stage, op.micro_batch
        self._seed_masks(state, s, m)
        self.model.forward_blocks(state.stash[s][m], *self.bounds[s], training=True)
        state.cached = (s, m)
        state.trace[s].append(f"RECOMP.{m + 1}")

    def _seed_masks(self, state: _RunState, stage: int, micro_batch: int) -> None:
        if state.seed is not None:
            self.model.set_rng(np.random.default_rng((state.seed, stage, micro_batch)))

    def _backward(self, op: Op, state: _RunState) -> None:
        s, m = op.stage, op.micro_batch
        if state.cached != (s, m):  # the layer caches hold another micro-batch: recompute first
            self._recompute(op, state)
        dy = state.grad_fifo[s].popleft()
        for p in state.params:
            p.grad[...] = 0.0
        dx = self.model.backward_blocks(dy, *self.bounds[s], need_dx=s > 0)
        state.cached = None
        for p in state.params:
            state.grads[p.name] += p.grad
        del state.stash[s][m]
        state.trace[s].append(op.label)
        if s > 0:
            state.grad_fifo[s - 1].append(np.array(dx, copy=True))


class _RunState:
    """FIFOs, stashes and accumulators of one ``run``."""

    def __init__(self, num_stages: int, params: list, num_micro_batches: int) -> None:
        self.act_fifo: list[deque[np.ndarray]] = [deque() for _ in range(num_stages)]
        self.grad_fifo: list[deque[np.ndarray]] = [deque() for _ in range(num_stages)]
        self.stash: list[dict[int, np.ndarray]] = [{} for _ in range(num_stages)]
        self.params = params
        self.grads = {p.name: np.zeros_like(p.data) for p in params}
        self.losses = [0.0] * num_micro_batches
        self.trace: list[list[str]] = [[] for _ in range(num_stages)]
        self.cached: tuple[int, int] | None = None
        self.seed: int | None = None


def _in_execution_order(schedule: Schedule) -> list[Op]:
    """Slot by slot; within a slot stage by stage, each stage's ops in its own order."""
    ops = [op for stage_ops in schedule.ops for op in stage_ops]
    position = {id(op): i for stage_ops in schedule.ops for i, op in enumerate(stage_ops)}
    return sorted(ops, key=lambda op: (op.slot, op.stage, position[id(op)]))
