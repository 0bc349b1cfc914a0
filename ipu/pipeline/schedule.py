"""Pipeline schedules: which operation each IPU runs, in which order and in which superstep.

A replica split into S stages (one per IPU) processes N micro-batches per weight update
(N = gradient accumulation count). Each stage runs FWD.m, optionally RECOMP.m (recompute its
forward from the stashed stage input), then BWD.m for every micro-batch m (labels are 1-based).
Time is divided into *slots*: bulk-synchronous supersteps that end in a sync of all IPUs, so a
slot lasts as long as its busiest IPU.

* ``grouped`` (Graphcore's default): the pipeline is 2S logical stages FWD stage 0..S-1 then
  BWD stage S-1..0; micro-batch m runs logical stage k in slot m + k. In a slot every IPU runs its
  forward, then its backward. Fastest; stage s stashes up to 2(S - s) micro-batches.
* ``interleaved``: one-forward-one-backward. Stage s first runs S - s forwards, then alternates
  one backward and one forward; each operation is its own slot, placed as early as its
  dependencies allow. Slower (forward and backward no longer share a slot); stage s stashes at
  most S - s micro-batches.
* ``sequential``: one micro-batch at a time through all stages, one operation per slot, as a
  sharded (unpipelined) model. Slowest; one micro-batch stashed per stage. A single-IPU replica
  runs this way (with recomputation: between block checkpoints, as Graphcore's single-IPU
  "pipeline" with recomputation does, docs/sources.md §7).

The reference (§8) names the schedules and their trade-offs but not their exact slot layout;
the layouts above are this emulator's model of them.

``device_mapping[s]`` is the IPU that stage s runs on (default: stage s on IPU s). Several stages
may share an IPU (Graphcore's ``device_mapping``, e.g. to keep layers that share weights together);
their operations in one slot then run back to back on that IPU.

Bubble arithmetic (checked against the placed timeline by ``tests/ipu/oracles.py::expected_bubble_share``): with every stage costing ``f`` per forward and
``b`` per backward and no recomputation, one weight update of N micro-batches on S stages lasts

* grouped: ``S f + (N - 1)(f + b) + S b`` (S forward-only ramp-up slots, N - 1 slots with a
  forward and a backward, S backward-only ramp-down slots);
* interleaved: ``S f + (S + 1) b + (2N - 3) max(f, b)`` (S forward-only slots while the first
  micro-batch reaches the last stage, S + 1 backward-only slots while the last one returns, and
  2N - 3 slots in between where some IPU runs a forward and another a backward);
* sequential: ``N S (f + b)`` (one operation at a time).

Each IPU works ``N (f + b)`` of that time; the rest is the pipeline bubble.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SCHEDULES = ("grouped", "interleaved", "sequential")


@dataclass(frozen=True)
class StageOp:
    """One operation of one stage on one micro-batch (0-based here, 1-based in labels)."""

    kind: str  # "FWD", "RECOMP" or "BWD"
    micro_batch: int
    stage: int
    slot: int

    @property
    def label(self) -> str:
        return f"{self.kind}.{self.micro_batch + 1}"


@dataclass(frozen=True)
class OpSchedule:
    """The per-IPU operation sequences of one weight update (ramp-up, main, ramp-down)."""

    kind: str
    num_stages: int
    num_micro_batches: int
    recompute: bool
    ops: tuple[tuple[StageOp, ...], ...]  # ops[stage], in execution order
    device_mapping: tuple[int, ...] = ()  # IPU of each stage; () = stage s on IPU s

    def ipu_of(self, stage: int) -> int:
        return self.device_mapping[stage] if self.device_mapping else stage

    @property
    def num_ipus(self) -> int:
        """IPUs the stages run on (the highest mapped IPU + 1)."""
        return 1 + max(self.ipu_of(s) for s in range(self.num_stages))

    @property
    def num_slots(self) -> int:
        return 1 + max(op.slot for stage_ops in self.ops for op in stage_ops)

    def labels(self) -> list[list[str]]:
        """``labels()[ipu]`` is that IPU's sequence such as ``["FWD.1", "FWD.2", "BWD.1", ...]``."""
        return [[op.label for op in stage_ops] for stage_ops in self.ops]

    def max_in_flight(self, stage: int) -> int:
        """Most micro-batches whose forward ran on ``stage`` but whose backward has not."""
        live = peak = 0
        for op in self.ops[stage]:
            live += {"FWD": 1, "BWD": -1}.get(op.kind, 0)
            peak = max(peak, live)
        return peak


def build_schedule(kind: str, num_stages: int, num_micro_batches: int, recompute: bool = False,
                   device_mapping: Sequence[int] = ()) -> OpSchedule:
    """The schedule ``kind`` for ``num_stages`` stages and ``num_micro_batches`` micro-batches.

    ``device_mapping``: the IPU of each stage (empty: stage s on IPU s); see :func:`check_device_mapping`.
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {kind!r}: choose one of {', '.join(SCHEDULES)}")
    if num_stages < 1 or num_micro_batches < 1:
        raise ValueError(
            f"a schedule needs at least 1 stage and 1 micro-batch, got {num_stages} stages and "
            f"{num_micro_batches} micro-batches"
        )
    builders = {"grouped": _grouped, "interleaved": _interleaved, "sequential": _sequential}
    slots = builders[kind](num_stages, num_micro_batches)
    ops = tuple(
        tuple(_with_recompute(stage_ops, num_stages, recompute)) for stage_ops in slots
    )
    mapping = check_device_mapping(device_mapping, num_stages, kind) if device_mapping else ()
    return OpSchedule(kind, num_stages, num_micro_batches, recompute, ops, mapping)


def check_device_mapping(device_mapping: Sequence[int], num_stages: int, kind: str) -> tuple[int, ...]:
    """One non-negative IPU index per stage. The interleaved schedule places each stage's operations
    in slots of their own, so it cannot share an IPU between stages (Graphcore's rule for training)."""
    mapping = tuple(int(i) for i in device_mapping)
    if len(mapping) != num_stages:
        raise ValueError(f"device_mapping {list(mapping)} has {len(mapping)} entries for {num_stages} stages: "
                         f"give one IPU index per stage")
    if any(i < 0 for i in mapping):
        raise ValueError(f"device_mapping {list(mapping)}: IPU indices must be >= 0")
    if kind == "interleaved" and len(set(mapping)) < len(mapping):
        raise ValueError(f"device_mapping {list(mapping)} puts several stages on one IPU, which the interleaved "
                         f"schedule does not support when training: use the grouped or sequential schedule, "
                         f"or one IPU per stage")
    return mapping


def recomputes(stage: int, num_stages: int, recompute: bool) -> bool:
    """Whether ``stage`` recomputes its forward before backward.

    Every stage but the last of a pipeline does (the last one's backward follows its forward);
    a single-stage replica recomputes between block checkpoints.
    """
    return recompute and (stage < num_stages - 1 or num_stages == 1)


def _with_recompute(stage_ops: list[StageOp], num_stages: int, recompute: bool) -> list[StageOp]:
    """Insert RECOMP.m before BWD.m on the stages that recompute."""
    out: list[StageOp] = []
    for op in stage_ops:
        if op.kind == "BWD" and recomputes(op.stage, num_stages, recompute):
            out.append(StageOp("RECOMP", op.micro_batch, op.stage, op.slot))
        out.append(op)
    return out


def _grouped(s_count: int, n: int) -> list[list[StageOp]]:
    per_stage = []
    for s in range(s_count):
        ops = [StageOp("FWD", m, s, m + s) for m in range(n)]
        ops += [StageOp("BWD", m, s, m + 2 * s_count - 1 - s) for m in range(n)]
        ops.sort(key=lambda op: (op.slot, op.kind != "FWD"))
        per_stage.append(ops)
    return per_stage


def _one_f_one_b_order(s: int, s_count: int, n: int) -> list[tuple[str, int]]:
    warmup = min(s_count - s, n)
    order = [("FWD", m) for m in range(warmup)]
    for m in range(n):
        order.append(("BWD", m))
        if m + warmup < n:
            order.append(("FWD", m + warmup))
    return order


def _interleaved(s_count: int, n: int) -> list[list[StageOp]]:
    """Place each stage's 1F1B order as early as data dependencies and its own order allow."""
    orders = [_one_f_one_b_order(s, s_count, n) for s in range(s_count)]
    done: dict[tuple[str, int, int], int] = {}  # (kind, stage, micro_batch) -> slot
    placed: list[list[StageOp]] = [[] for _ in range(s_count)]
    cursor = [0] * s_count
    while any(cursor[s] < len(orders[s]) for s in range(s_count)):
        progressed = False
        for s in range(s_count):
            if cursor[s] == len(orders[s]):
                continue
            kind, m = orders[s][cursor[s]]
            deps = [("FWD", s - 1, m)] if kind == "FWD" and s > 0 else []
            if kind == "BWD":
                deps = [("FWD", s, m)] + ([("BWD", s + 1, m)] if s < s_count - 1 else [])
            if any(d not in done for d in deps):
                continue
            prev = placed[s][-1].slot + 1 if placed[s] else 0
            slot = max([prev] + [done[d] + 1 for d in deps])
            done[(kind, s, m)] = slot
            placed[s].append(StageOp(kind, m, s, slot))
            cursor[s] += 1
            progressed = True
        if not progressed:  # cannot happen for the orders above; guards against a future edit
            raise RuntimeError("interleaved schedule deadlocked")
    return placed


def _sequential(s_count: int, n: int) -> list[list[StageOp]]:
    per_stage: list[list[StageOp]] = [[] for _ in range(s_count)]
    slot = 0
    for m in range(n):
        for s in range(s_count):
            per_stage[s].append(StageOp("FWD", m, s, slot))
            slot += 1
        for s in reversed(range(s_count)):
            per_stage[s].append(StageOp("BWD", m, s, slot))
            slot += 1
    return per_stage
