"""The user-facing pipelining API: equal to the same model unpipelined, its checks, its schedule arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ipu.memory import IpuOutOfMemoryError
from ipu.runtime.loops import IPUInfeedQueue, IPUOutfeedQueue, repeat
from ipu.runtime.pipelining import (OptimizerFunctionOutput, OptimizerSpec, PipelineSchedule, RecomputationMode,
                                    pipeline)
from ipu.pipeline.schedule import build_schedule
from ipu.pipeline.timeline import bubble_share
from ipu.runtime.stages import conv2d, cross_entropy, dense, dropout, flatten, global_average_pool, layer
from models.dense import Dense
from models.optim import OptimConfig
from tests.ipu.oracles import expected_bubble_share

DATA = Path(__file__).resolve().parents[3] / "data" / "fashion-mnist-subset.h5"
MICRO = 4


def stage1(x):
    return dropout(dense(flatten(x), 32, activation="relu"), 0.3)


def stage2(x):
    return dropout(dense(x, 16, activation="relu"), 0.3)


def stage3(x):
    return dense(x, 16, activation="relu")


def head(x):
    return dense(x, 10)


def sgd(logits, labels):
    opt = OptimizerSpec(0.05, OptimConfig("sgd", momentum=0.9))
    return OptimizerFunctionOutput(opt, cross_entropy(logits, labels))


def feeds():
    return IPUInfeedQueue(DATA, MICRO, prefetch_micro_batches=0), IPUOutfeedQueue()


def train(program, outfeed, calls=2):
    losses = []
    for _ in range(calls):
        program.run()
        losses.extend(outfeed.dequeue()["loss"])
    return losses


def unpipelined(stages, accumulation, steps=2):
    infeed, outfeed = feeds()
    program = repeat(steps, stages, infeed, outfeed, sgd, gradient_accumulation_count=accumulation)
    return program, train(program, outfeed)


@pytest.mark.parametrize("schedule,recompute", [(PipelineSchedule.Grouped, True),
                                                (PipelineSchedule.Interleaved, False),
                                                (PipelineSchedule.Sequential, True)])
def test_pipeline_equals_the_same_model_unpipelined_with_dropout(schedule, recompute):
    infeed, outfeed = feeds()
    pipe = pipeline([stage1, stage2, head], gradient_accumulation_count=6, repeat_count=2, infeed_queue=infeed,
                    outfeed_queue=outfeed, optimizer_function=sgd, pipeline_schedule=schedule, recompute=recompute)
    losses = train(pipe, outfeed)
    ref, ref_losses = unpipelined([stage1, stage2, head], 6)
    assert losses == ref_losses and len(losses) == 4
    np.testing.assert_array_equal(pipe.engine.flat, ref.engine.flat)  # the last update's gradient sum
    for p, q in zip(pipe.model.params(), ref.model.params()):
        assert p.name == q.name
        np.testing.assert_array_equal(p.data, q.data, err_msg=p.name)
    trace = pipe.engine.replicas[0].last_run.trace  # the runtime ran the schedule's operations
    assert [[op for op in ops if not op.startswith("RECOMP")] for ops in trace] == [
        [op for op in ops if not op.startswith("RECOMP")] for ops in pipe.schedule.labels()]


def test_dropout_draws_masks_that_matter():
    """The equality above would also hold without dropout: check the masks change the losses."""
    _, with_dropout = unpipelined([stage1, stage2, head], 6)
    _, without = unpipelined([lambda x: dense(flatten(x), 32, activation="relu"),
                              lambda x: dense(x, 16, activation="relu"), head], 6)
    assert with_dropout != without


def test_four_stages_with_two_sharing_an_ipu_equal_the_unpipelined_model():
    infeed, outfeed = feeds()
    pipe = pipeline([stage1, stage2, stage3, head], gradient_accumulation_count=8, repeat_count=2,
                    infeed_queue=infeed, outfeed_queue=outfeed, optimizer_function=sgd,
                    device_mapping=[0, 1, 2, 0], recompute=True)
    assert train(pipe, outfeed) == unpipelined([stage1, stage2, stage3, head], 8)[1]
    assert pipe.plan.ipus_per_replica == 4 and pipe.schedule.num_ipus == 3
    assert [m.blocks for m in pipe.memory.ipus] == [("stage1", "stage4"), ("stage2",), ("stage3",)]
    lines = pipe.timeline().splitlines()
    assert lines[1].startswith("IPU1: S1:FWD.1 S1:FWD.2 ") and "S4:FWD.1" in lines[1]
    assert lines[3].startswith("IPU3: FWD.1 FWD.2 ")


def test_three_stages_on_a_four_ipu_replica_timeline_and_memory(tmp_path):
    infeed, outfeed = feeds()
    pipe = pipeline([stage1, stage2, head], gradient_accumulation_count=6, infeed_queue=infeed,
                    outfeed_queue=outfeed, optimizer_function=sgd)
    assert pipe.timeline().splitlines()[1:] == [
        "IPU1: FWD.1 FWD.2 FWD.3 FWD.4 FWD.5 FWD.6 BWD.1 BWD.2 BWD.3 BWD.4 BWD.5 BWD.6",
        "IPU2: FWD.1 FWD.2 FWD.3 FWD.4 BWD.1 FWD.5 BWD.2 FWD.6 BWD.3 BWD.4 BWD.5 BWD.6",
        "IPU3: FWD.1 FWD.2 BWD.1 FWD.3 BWD.2 FWD.4 BWD.3 FWD.5 BWD.4 FWD.6 BWD.5 BWD.6",
    ]
    weights = [m.by_category["weights"] for m in pipe.memory.ipus]
    assert weights == [4 * (784 * 32 + 32), 4 * (32 * 16 + 16), 4 * (16 * 10 + 10)]  # float32, per stage
    assert all(m.fits for m in pipe.memory.ipus) and "stage2" in pipe.memory_report()
    assert pipe.plot_timeline(tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    pipe.run()
    assert set(pipe.stage_costs("measured")[0]) >= {"FWD", "BWD"}
    assert 0.0 < pipe.bubble_share("measured") < 1.0


def test_accumulation_below_twice_the_stages_is_rejected_with_the_fix():
    infeed, outfeed = feeds()
    with pytest.raises(ValueError, match=r"at least 2 x stages = 6; raise gradient_accumulation_count to 6 or "
                                         r"more, or use fewer computational_stages"):
        pipeline([stage1, stage2, head], gradient_accumulation_count=5, infeed_queue=infeed,
                 outfeed_queue=outfeed, optimizer_function=sgd)


def test_pipeline_depth_is_the_deprecated_name_of_the_accumulation_count():
    infeed, outfeed = feeds()
    with pytest.warns(DeprecationWarning, match="use gradient_accumulation_count"):
        pipe = pipeline([stage1, head], pipeline_depth=4, infeed_queue=infeed, outfeed_queue=outfeed,
                        optimizer_function=sgd)
    assert pipe.schedule.num_micro_batches == 4
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        pipeline([stage1, head], gradient_accumulation_count=8, pipeline_depth=4, infeed_queue=feeds()[0],
                 optimizer_function=sgd)


@pytest.mark.parametrize("kind", ["grouped", "interleaved", "sequential"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("fwd,bwd", [(1, 1), (1, 2), (2, 1), (1, 3)])
def test_bubble_share_of_each_schedule_is_its_arithmetic(kind, stages, fwd, bwd):
    for n in (2 * stages, 2 * stages + 1, 3 * stages + 2):
        schedule = build_schedule(kind, stages, n)
        costs = [{"FWD": float(fwd), "BWD": float(bwd)}] * stages
        assert bubble_share(schedule, costs) == float(expected_bubble_share(kind, stages, n, fwd, bwd))


def test_bubble_share_exact_values():
    def share(kind, s, n, f, b):
        return bubble_share(build_schedule(kind, s, n), [{"FWD": f, "BWD": b}] * s)

    assert share("grouped", 2, 4, 1.0, 2.0) == 0.2  # (S f + (N-1)(f+b) + S b) = 15 slots-worth, 12 busy
    assert share("grouped", 4, 8, 1.0, 1.0) == 3 / 11  # (S-1)/(N+S-1)
    assert share("interleaved", 2, 4, 1.0, 1.0) == 0.2  # 10 slots, 8 busy
    assert share("interleaved", 2, 4, 1.0, 2.0) == 1 / 3  # 2 f + 3 b + 5 max(f, b) = 18, 12 busy
    assert share("sequential", 3, 6, 1.0, 2.0) == 2 / 3  # (S-1)/S
    assert expected_bubble_share("grouped", 2, 4, 1, 2) == pytest.approx(0.2) and \
        str(expected_bubble_share("interleaved", 2, 4, 1, 2)) == "1/3"


def test_the_programs_own_schedule_has_the_predicted_bubble():
    infeed, outfeed = feeds()
    pipe = pipeline([stage1, head], gradient_accumulation_count=4, infeed_queue=infeed, outfeed_queue=outfeed,
                    optimizer_function=sgd, pipeline_schedule="interleaved")
    unit = [{"FWD": 1.0, "BWD": 1.0}] * 2
    assert bubble_share(pipe.schedule, unit) == float(expected_bubble_share("interleaved", 2, 4)) == 0.2


def test_layer_sequences_and_conv_stages_compile():
    infeed, outfeed = feeds()
    pipe = pipeline([lambda x: flatten(conv2d(x, 4, 3, strides=2, activation="relu")),
                     [Dense("classifier", "any", 14 * 14 * 4, 10)]],
                    gradient_accumulation_count=4, infeed_queue=infeed, outfeed_queue=outfeed,
                    optimizer_function=sgd)
    assert [p.name for p in pipe.model.params()] == ["stage1.0.weight", "stage1.0.bias", "classifier.weight",
                                                     "classifier.bias"]
    assert np.isfinite(pipe.run()[0].loss)


def test_a_model_that_does_not_fit_fails_at_compile_time_naming_the_ipu():
    """64 x 28 x 28 x 2048 activations stashed for 4 micro-batches in flight: 1.6 GB on IPU 0."""
    with pytest.raises(IpuOutOfMemoryError, match="Out of memory on tile .* of IPU 0: .* enable recomputation"):
        pipeline([lambda x: conv2d(x, 2048, 3, activation="relu"), lambda x: dense(global_average_pool(x), 10)],
                 gradient_accumulation_count=4, infeed_queue=IPUInfeedQueue(DATA, 64), optimizer_function=sgd)


@pytest.mark.parametrize("kwargs,message", [
    ({"computational_stages": [stage1]}, "at least two computational stages"),
    ({"device_mapping": [0, 0], "pipeline_schedule": PipelineSchedule.Interleaved}, "interleaved schedule"),
    ({"device_mapping": [0]}, "1 entries for 2 stages"),
    ({"recomputation_mode": RecomputationMode.RecomputeAndBackpropagateInterleaved}, "not modelled"),
    ({"pipeline_schedule": "1f1b"}, "not one of PipelineSchedule"),
    ({"computational_stages": [stage1, lambda x: x]}, "stage 2 has no layers"),
    ({"computational_stages": [lambda x: dense(x, 10), head]}, r"dense needs a flat input .* call flatten\(x\)"),
    ({"computational_stages": [lambda x: (flatten(x), 1), head]}, "must return the tensor its last layer made"),
])
def test_bad_pipelines_fail_with_the_fix(kwargs, message):
    infeed, outfeed = feeds()
    args = {"computational_stages": [stage1, head], "gradient_accumulation_count": 4, "infeed_queue": infeed,
            "outfeed_queue": outfeed, "optimizer_function": sgd, **kwargs}
    with pytest.raises(ValueError, match=message):
        pipeline(**args)


def test_stages_are_chains():
    def branching(x):
        a = dense(x, 8)
        dense(x, 8)  # a second consumer of x: a branch
        return a

    infeed, _ = feeds()
    with pytest.raises(ValueError, match="each layer must take the previous layer's output"):
        pipeline([lambda x: flatten(x), branching, head], gradient_accumulation_count=6, infeed_queue=infeed,
                 optimizer_function=sgd)
    with pytest.raises(TypeError, match="models layers only"):
        pipeline([stage1, [head]], gradient_accumulation_count=4, infeed_queue=feeds()[0], optimizer_function=sgd)
    assert layer  # exported for user-built layers (used above through a layer sequence)


def test_feeds_one_program_per_infeed_and_records_per_update():
    infeed, outfeed = feeds()
    program = repeat(3, head_on_images, infeed, outfeed, sgd)
    assert [r.step for r in program.run()] == [0, 1, 2]
    got = outfeed.dequeue()
    assert list(got["step"]) == [0, 1, 2] and list(got["samples"]) == [MICRO] * 3 and got["loss"].shape == (3,)
    assert all(len(v) == 0 for v in outfeed.dequeue().values())
    with pytest.raises(RuntimeError, match="one queue per program"):
        repeat(3, head_on_images, infeed, outfeed, sgd)
    with pytest.raises(ValueError, match="batch_size .* must be an integer >= 1"):
        IPUInfeedQueue(DATA, 0)
    with pytest.raises(ValueError, match="needs infeed_queue"):
        repeat(1, head_on_images, None, outfeed, sgd)


def head_on_images(x):
    return dense(flatten(x), 10)


def test_ipus_per_replica_come_from_poprun_or_the_mapping():
    from ipu.runtime.program import _ipus_per_replica

    from poprun_py.env import ALONE, DistInfo

    def under_poprun(ipus: int) -> DistInfo:
        return DistInfo(is_set=True, placement=ALONE._replace(ipus_per_replica=ipus))

    assert _ipus_per_replica(DistInfo(is_set=False), 3) == 4  # alone: the next power of two
    assert _ipus_per_replica(under_poprun(4), 2) == 4
    with pytest.raises(ValueError, match="mapped onto 2 IPUs but each replica has 1: run under poprun_py "
                                         "--ipus-per-replica 2"):
        _ipus_per_replica(under_poprun(1), 2)
