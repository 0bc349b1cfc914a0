"""A pipelined replica gives the same losses and gradients as the unpipelined model."""

import numpy as np
import pytest

import models
from ipu.pipeline.execution import PipelinedReplica

NUM_CLASSES = 10


def _model():
    return models.build_model("efficientnet-tiny-gn", NUM_CLASSES, seed=3, dropout=0.0, drop_connect=0.0)


@pytest.fixture(scope="module")
def micro_batches():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((2, 32, 32, 3)).astype(np.float32), rng.integers(0, NUM_CLASSES, 2))
            for _ in range(8)]


@pytest.mark.parametrize("splits,schedule,recompute", [
    (["block4a"], "grouped", True),
    (["block4a"], "grouped", False),
    (["block2a", "block4a", "block6a"], "grouped", True),
    (["block3a", "block5a"], "interleaved", False),
    (["block4a"], "sequential", False),
])
def test_pipelined_equals_unpipelined(micro_batches, splits, schedule, recompute):
    n = 2 * (len(splits) + 1)
    replica = PipelinedReplica(_model(), splits, schedule, recompute)
    result = replica.run(micro_batches[:n], models.softmax_cross_entropy)
    ref_losses, ref_grads = _unpipelined(micro_batches[:n])
    np.testing.assert_allclose(result.losses, ref_losses, rtol=1e-5)
    for name, g in ref_grads.items():
        np.testing.assert_allclose(result.grads[name], g, rtol=2e-4, atol=1e-6, err_msg=name)


def _unpipelined(batches):
    """Micro-batch by micro-batch through the whole model, gradients summed."""
    model = _model()
    grads = {p.name: np.zeros_like(p.data) for p in model.params()}
    losses = []
    for x, y in batches:
        loss, dlogits = models.softmax_cross_entropy(model.forward(x, True), y)
        model.backward(dlogits)
        losses.append(loss)
        for p in model.params():
            grads[p.name] += p.grad
    return losses, grads


def test_execution_follows_the_schedule(micro_batches):
    replica = PipelinedReplica(_model(), ["block4a"], "grouped", True)
    result = replica.run(micro_batches[:4], models.softmax_cross_entropy)
    assert result.trace[0] == ["FWD.1", "FWD.2", "FWD.3", "FWD.4", "RECOMP.1", "BWD.1", "RECOMP.2", "BWD.2",
                               "RECOMP.3", "BWD.3", "RECOMP.4", "BWD.4"]
    # the last stage's caches are overwritten by the next forward, so it recomputes too
    assert result.trace[1][:4] == ["FWD.1", "FWD.2", "RECOMP.1", "BWD.1"]


def test_too_few_micro_batches_for_the_stages(micro_batches):
    with pytest.raises(ValueError, match="at least 2 x stages = 4"):
        PipelinedReplica(_model(), ["block4a"]).run(micro_batches[:3], models.softmax_cross_entropy)


def test_seeded_recomputation_reproduces_dropout_masks(micro_batches):
    """With dropout and drop-connect on, micro-batch m's masks come from one generator across the
    stages, as in one unpipelined forward, and recomputation replays them."""
    def model():
        return models.build_model("efficientnet-tiny-gn", NUM_CLASSES, seed=3, dropout=0.5, drop_connect=0.5)

    splits, batches = ["block4a"], micro_batches[:4]
    result = PipelinedReplica(model(), splits, "grouped", True).run(batches, models.softmax_cross_entropy, seed=11)
    assert "RECOMP.1" in result.trace[0]
    ref = model()
    grads = {p.name: np.zeros_like(p.data) for p in ref.params()}
    for m, (x, y) in enumerate(batches):
        ref.set_rng(np.random.default_rng((11, m)))
        loss, dlogits = models.softmax_cross_entropy(ref.forward(x, training=True), y)
        ref.backward(dlogits)
        assert result.losses[m] == loss
        for p in ref.params():
            grads[p.name] += p.grad
    for name, g in grads.items():
        np.testing.assert_array_equal(result.grads[name], g, err_msg=name)
    unseeded = PipelinedReplica(model(), splits, "grouped", True).run(batches, models.softmax_cross_entropy)
    assert any(not np.allclose(unseeded.grads[n], g, rtol=2e-4, atol=1e-6) for n, g in grads.items())


def test_accumulate_receives_each_stage_once_per_micro_batch(micro_batches):
    model = _model()
    replica = PipelinedReplica(model, ["block4a"], "interleaved", False)
    calls = []
    result = replica.run(micro_batches[:4], models.softmax_cross_entropy,
                         accumulate=lambda params: calls.append([p.name for p in params]))
    stage0, stage1 = (model.block_params("stem", "block4a"), model.block_params("block4a"))
    assert sorted(calls) == sorted([[p.name for p in stage0]] * 4 + [[p.name for p in stage1]] * 4)
    assert result.grads == {} and set(result.seconds[0]) == {"FWD", "BWD"}
