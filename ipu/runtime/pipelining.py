"""Pipelining any model, in the shape of Graphcore's TensorFlow ``pipelining_ops.pipeline``.

    from ipu.runtime.pipelining import (OptimizerFunctionOutput, OptimizerSpec, PipelineSchedule, pipeline)
    from ipu.runtime.stages import cross_entropy, dense, dropout, flatten

    def stage1(x):                                   # IPU 0
        return dropout(dense(flatten(x), 256, activation="relu"), 0.2)

    def stage2(x):                                   # IPU 1
        return dense(x, 10)

    def optimizer_function(logits, labels):
        return OptimizerFunctionOutput(OptimizerSpec(0.05), cross_entropy(logits, labels))

    pipe = pipeline([stage1, stage2], gradient_accumulation_count=8, repeat_count=10,
                    infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=optimizer_function,
                    pipeline_schedule=PipelineSchedule.Grouped)
    pipe.run()                 # one host call: 10 weight updates of 8 micro-batches per replica
    print(pipe.timeline())     # IPU1: FWD.1 FWD.2 ... BWD.1 ...

The program runs on the same runtime as every training run of this project (``PipelinedIpuReplica``:
stages with activation FIFOs in the schedule's order; ``Engine``: gradient all-reduce and the
optimizer step; see ``ipu.runtime.program``). Where it differs from TensorFlow's: stages pass one
tensor each and the labels go from the infeed straight to ``optimizer_function`` (TensorFlow
threads them through every stage); the outfeed holds one record per weight update (the mean
loss, as with ``outfeed_loss=True, accumulate_outfeed=True``); recomputation is switched on with
``recompute=True`` (TensorFlow: the IPU config's ``allow_recompute``); ``inputs`` and the Poplar
option arguments do not exist.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from enum import Enum, IntEnum

from ipu.runtime.program import OptimizerFunctionOutput, OptimizerSpec, Program, ProgramConfig, compile_program
from ipu.runtime.stages import StageLike

__all__ = ["OptimizerFunctionOutput", "OptimizerSpec", "PipelineSchedule", "Program", "RecomputationMode", "pipeline"]


class PipelineSchedule(IntEnum):
    """How the stages' forward and backward passes share the IPUs (``ipu.pipeline.schedule`` has the layouts).

    Grouped: forwards of all IPUs in one superstep, backwards in the next; fastest, stashes the most.
    Interleaved: one forward, one backward; stashes the fewest, slower (passes no longer align).
    Sequential: one micro-batch at a time, as a sharded model; for debugging.
    """

    Grouped = 0
    Interleaved = 1
    Sequential = 2

    @property
    def kind(self) -> str:
        return self.name.lower()


class RecomputationMode(Enum):
    """Which recomputation strategy (with ``recompute=True``). Auto and RecomputeThenBackpropagate
    re-run a stage's forward from its stashed input right before each backward, which is what this
    emulator does; RecomputeAndBackpropagateInterleaved is not modelled."""

    Auto = "auto"
    RecomputeThenBackpropagate = "recompute_then_backpropagate"
    RecomputeAndBackpropagateInterleaved = "recompute_and_backpropagate_interleaved"


def pipeline(computational_stages: Sequence[StageLike], gradient_accumulation_count: int | None = None,
             repeat_count: int = 1, infeed_queue=None, outfeed_queue=None,
             optimizer_function: Callable | None = None, device_mapping: Sequence[int] | None = None,
             pipeline_schedule: PipelineSchedule | str | None = None,
             recomputation_mode: RecomputationMode | None = None, recompute: bool = False, seed: int = 0,
             available_memory_proportion: float = 0.6, chip: str = "mk2", name: str | None = None,
             pipeline_depth: int | None = None) -> Program:
    """Compile ``computational_stages`` as a pipeline over IPUs and return the program to run.

    computational_stages: two or more stage functions or layer sequences (``ipu.runtime.stages``);
      stage k's output feeds stage k + 1; the last one returns the logits.
    gradient_accumulation_count: micro-batches per weight update (each stage runs this many times),
      at least twice the number of stages. ``pipeline_depth`` is its deprecated older name.
    repeat_count: weight updates per host call (``Program.run``).
    infeed_queue / outfeed_queue: ``ipu.runtime.loops.IPUInfeedQueue`` / ``IPUOutfeedQueue``.
    optimizer_function: ``(logits, labels) -> OptimizerFunctionOutput(OptimizerSpec(...), loss)``.
    device_mapping: the IPU of each stage (default: stage k on IPU k); stages may share an IPU
      except under the interleaved schedule.
    pipeline_schedule: ``PipelineSchedule`` (or its name); default Grouped.
    recompute / recomputation_mode: recompute every stage's forward (but the last's) before its
      backward instead of stashing its activations.
    seed: weight initialisation and the replicas' random streams (dropout).
    available_memory_proportion, chip: for the memory fit per IPU.
    """
    count = _accumulation_count(gradient_accumulation_count, pipeline_depth)
    stages = list(computational_stages) if isinstance(computational_stages, (list, tuple)) else None
    if stages is None:
        raise TypeError("computational_stages must be a list or tuple of stage functions or layer sequences")
    if len(stages) < 2:
        raise ValueError(f"a pipeline needs at least two computational stages, got {len(stages)}; for a model on "
                         f"one IPU use ipu.runtime.loops.repeat(count, body, ...)")
    schedule = _schedule_kind(pipeline_schedule)
    if recomputation_mode is not None and not isinstance(recomputation_mode, RecomputationMode):
        raise TypeError(f"recomputation_mode must be a RecomputationMode, got {recomputation_mode!r}")
    if recomputation_mode is RecomputationMode.RecomputeAndBackpropagateInterleaved:
        raise ValueError("RecomputationMode.RecomputeAndBackpropagateInterleaved is not modelled by this emulator: "
                         "use RecomputationMode.Auto (recompute, then backpropagate, per micro-batch)")
    cfg = ProgramConfig(gradient_accumulation=count, device_mapping=tuple(device_mapping or ()), schedule=schedule,
                        recompute=bool(recompute), repeat_count=repeat_count, seed=seed,
                        available_memory_proportion=available_memory_proportion, chip=chip, name=name or "pipeline")
    return compile_program(stages, optimizer_function, infeed_queue, outfeed_queue, cfg)


def _accumulation_count(gradient_accumulation_count: int | None, pipeline_depth: int | None) -> int:
    if pipeline_depth is not None:
        warnings.warn("pipeline(pipeline_depth=...) is deprecated: use gradient_accumulation_count (the same "
                      "number: micro-batches per weight update)", DeprecationWarning, stacklevel=3)
        if gradient_accumulation_count is not None and gradient_accumulation_count != pipeline_depth:
            raise ValueError(f"gradient_accumulation_count={gradient_accumulation_count} and its deprecated name "
                             f"pipeline_depth={pipeline_depth} disagree: give only gradient_accumulation_count")
        gradient_accumulation_count = pipeline_depth
    if gradient_accumulation_count is None:
        raise ValueError("gradient_accumulation_count must be specified (micro-batches per weight update, "
                         "at least 2 x the number of stages)")
    return gradient_accumulation_count


def _schedule_kind(schedule: PipelineSchedule | str | None) -> str:
    if schedule is None:
        return "grouped"
    if isinstance(schedule, PipelineSchedule):
        return schedule.kind
    if isinstance(schedule, str) and schedule.lower() in ("grouped", "interleaved", "sequential"):
        return schedule.lower()
    raise ValueError(f"pipeline_schedule {schedule!r} is not one of PipelineSchedule.Grouped, .Interleaved, "
                     f".Sequential (or their names)")
