"""The engine in one process: gradient means, loss scaling, checks, replicas and device ops."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.runtime.engine import Engine, WeightDivergenceError, flat_views, weight_digest
from ipu.runtime.mixing import cutmix, mixed_cross_entropy, mixup
from ipu.runtime.replica import DeviceOps, PipelinedIpuReplica, SingleIpuReplica, replica_rng
from models import build_model, softmax_cross_entropy
from models.optim.loss_scaling import LossScaleConfig, LossScaler, NonFiniteLossError
from models.optim import OptimConfig, make_optimizer
from models.optim.schedules import ScheduleConfig, make_schedule
from models.param import pack_grads
from ipu.runtime.streams import ReplicaFeed
from poprun_py.comm import LoopbackComm

MEAN, STD = (100.0,), (50.0,)


def dense(seed=0):
    return build_model("dense-mnist", 10, seed=seed, hidden=[8], resolution=4, in_channels=1)


def batch(replicas, accum, micro, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (replicas, accum, micro, 4, 4, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, (replicas, accum, micro))
    return images, labels


def engine_for(model, replicas=2, accum=3, comm=None, scale=1.0, kind="static", lr=0.1, checksum_every=0):
    comm = comm or LoopbackComm()
    device = DeviceOps(MEAN, STD, seed=1)
    reps = [SingleIpuReplica(model, i, device) for i in range(replicas)]
    opt = make_optimizer(OptimConfig(name="sgd", momentum=0.0), model.params())
    sched = make_schedule(ScheduleConfig(kind="constant", base_lr=lr), 10, 100)
    scaler = LossScaler(LossScaleConfig(kind=kind, initial_scale=scale, min_scale=1.0))
    return Engine(model, opt, sched, comm, reps, grad_accum=accum, total_replicas=replicas * comm.size,
                  scaler=scaler, checksum_every=checksum_every)


def full_batch_grads(model, images, labels):
    """Mean-loss gradient of all samples at once (equal micro-batches: the same as the engine's mean)."""
    x = ((images.reshape(-1, 4, 4, 1).astype(np.float64) - MEAN[0]) / STD[0]).astype(np.float32)
    logits = model.forward(x, training=True)
    _, d = softmax_cross_entropy(logits, labels.reshape(-1))
    model.backward(d, need_dx=False)
    return [p.grad.copy() for p in model.params()]


@pytest.mark.parametrize("scale", [1.0, 128.0])
def test_update_uses_the_mean_gradient_over_replicas_and_micro_batches(scale):
    model, reference = dense(), dense()
    images, labels = batch(2, 3, 4)
    expected = full_batch_grads(reference, images, labels)
    before = [p.data.copy() for p in model.params()]
    m = engine_for(model, scale=scale).train_step(images, labels)
    for p, w0, g in zip(model.params(), before, expected):
        np.testing.assert_allclose(p.data, w0 - 0.1 * g, rtol=1e-5, atol=1e-7)
    assert m.applied and m.samples == 24 and m.step == 0 and m.loss_scale == scale


def test_replacing_a_parameters_arrays_between_updates_changes_no_update():
    """The replicas, the engine and the optimizer remember views of the parameters' arrays until
    ``models.param.generation`` changes: new arrays (a new gradient buffer, a weight copied) are used."""
    model, reference = dense(), dense()
    engine, ref = engine_for(model), engine_for(reference)
    for step in range(3):
        images, labels = batch(2, 3, 4, seed=step)
        if step:
            pack_grads(model.params())  # every gradient into a new buffer
            model.params()[step].data = model.params()[step].data.copy()
        engine.train_step(images, labels)
        ref.train_step(images, labels)
        for p, q in zip(model.params(), reference.params()):
            assert p.data.tobytes() == q.data.tobytes(), (step, p.name)


def test_flat_views_cover_the_buffer_back_to_back():
    model = dense()
    flat = np.arange(sum(p.data.size for p in model.params()), dtype=np.float32)
    views = flat_views(model.params(), flat)
    assert [v.shape for v in views] == [p.data.shape for p in model.params()]
    assert views[1].reshape(-1)[0] == model.params()[0].data.size
    with pytest.raises(ValueError, match="flat buffer"):
        flat_views(model.params(), flat[:-1])


def test_non_finite_loss_stops_the_run_naming_the_update():
    model = dense()
    engine = engine_for(model)
    images, labels = batch(2, 3, 4)
    engine.train_step(images, labels)
    engine.train_step(images, labels)
    model.params()[0].data[0, 0] = np.nan
    with pytest.raises(NonFiniteLossError, match="weight update 2"):
        engine.train_step(images, labels)


def test_dynamic_loss_scaling_skips_the_update_and_lowers_the_scale():
    model = dense()
    engine = engine_for(model, scale=2.0**10, kind="dynamic")
    images, labels = batch(2, 3, 4)
    model.params()[2].data[0, 0] = np.inf  # poisons the logits: non-finite loss
    before = [p.data.copy() for p in model.params()]
    m = engine.train_step(images, labels)
    assert not m.applied and engine.scaler.scale == 2.0**9 and engine.step == 1
    for p, w0 in zip(model.params(), before):
        np.testing.assert_array_equal(p.data, w0)


class SkewedComm(LoopbackComm):
    """Pretends to be 3 instances, of which instance 2 holds different weights."""

    size = 3

    def allreduce(self, array, op="sum"):
        array *= 3
        return array

    def allgather(self, array):
        out = np.stack([array, array, array + 1.0])
        return out


def test_weight_checksum_names_the_diverged_instance():
    model = dense()
    engine = engine_for(model, replicas=1, comm=SkewedComm(), checksum_every=2)
    images, labels = batch(1, 3, 4)
    engine.train_step(images, labels)
    with pytest.raises(WeightDivergenceError, match=r"after update 2: instance\(s\) \[2\] differ from instance 0"):
        engine.train_step(images, labels)


def test_weight_digest_sees_a_single_changed_weight():
    model = dense()
    d0 = weight_digest(model.params())
    model.params()[1].data[3] += 1e-3
    assert not np.array_equal(d0, weight_digest(model.params()))


def test_engine_rejects_unequal_replica_counts():
    model = dense()
    with pytest.raises(ValueError, match="same number of replicas"):
        Engine(model, None, None, LoopbackComm(), [], grad_accum=1, total_replicas=2, scaler=None)


def test_each_replica_keeps_its_own_batch_norm_statistics():
    model = build_model("efficientnet-tiny", 10, seed=0, resolution=16, in_channels=1, width=0.1, depth=0.1,
                        dropout=0.0, drop_connect=0.0)
    device = DeviceOps(MEAN, STD)
    reps = [SingleIpuReplica(model, i, device) for i in range(2)]
    grads = [np.zeros_like(p.data) for p in model.params()]
    rng = np.random.default_rng(0)
    for r, rep in enumerate(reps):
        images = rng.integers(0, 256 if r else 50, (1, 4, 16, 16, 1), dtype=np.uint8)
        rep.run_from(ReplicaFeed([(images, rng.integers(0, 10, (1, 4)))]), step=0, grads=grads, loss_scale=1.0)
    key = "features.0.1.running_mean"
    s0, s1 = reps[0].state_dict()[key], reps[1].state_dict()[key]
    assert not np.allclose(s0, s1)
    reps[1].load_state_dict(reps[0].state_dict())
    np.testing.assert_array_equal(reps[1].state_dict()[key], s0)


@pytest.mark.parametrize("schedule,recompute", [("grouped", True), ("interleaved", False), ("sequential", True)])
def test_pipelined_replica_equals_the_single_ipu_replica_with_dropout_and_drop_connect(schedule, recompute):
    """Issue 11: the pipelined replica continues each micro-batch's stream for its masks, so with
    dropout, drop-connect and mixup on it draws what the single-IPU replica draws: bitwise equal."""
    model = build_model("efficientnet-tiny", 10, seed=0, resolution=16, in_channels=1, width=0.1, depth=0.1,
                        dropout=0.5, drop_connect=0.5, norm="group")
    device = DeviceOps(MEAN, STD, seed=4, mixup_alpha=0.2)
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (4, 2, 16, 16, 1), dtype=np.uint8), rng.integers(0, 10, (4, 2))
    results = []
    for replica in (SingleIpuReplica(model, 3, device),
                    PipelinedIpuReplica(model, 3, device, ["block4a"], schedule, recompute)):
        grads = [np.zeros_like(p.data, dtype=np.float64) for p in model.params()]
        res = replica.run_from(ReplicaFeed([(images, labels)]), step=5, grads=grads, loss_scale=8.0)
        results.append((res, grads))
    (r0, g0), (r1, g1) = results
    assert r0 == r1 and r0.count == 8
    for a, b in zip(g0, g1):
        np.testing.assert_array_equal(b, a)
    # the masks do matter: another step draws other ones
    other = [np.zeros_like(p.data, dtype=np.float64) for p in model.params()]
    replica.run_from(ReplicaFeed([(images, labels)]), step=6, grads=other, loss_scale=8.0)
    assert any(not np.allclose(a, b) for a, b in zip(g1, other))


def test_replica_streams_depend_on_step_replica_and_micro_batch_only():
    a = replica_rng(7, 3, 2, 1).random(4)
    np.testing.assert_array_equal(a, replica_rng(7, 3, 2, 1).random(4))
    for other in (replica_rng(7, 4, 2, 1), replica_rng(7, 3, 1, 1), replica_rng(7, 3, 2, 0), replica_rng(8, 3, 2, 1)):
        assert not np.array_equal(a, other.random(4))


def test_a_restarted_generator_draws_the_stream_of_a_new_one():
    gen = replica_rng(7, 3, 2, 1)
    gen.random(5)
    gen.integers(0, 2**32, size=3, dtype=np.uint32)  # an odd count of 32-bit draws leaves a half cached
    again = replica_rng(7, 3, 2, 1, reuse=gen)
    assert again is gen
    fresh = replica_rng(7, 3, 2, 1)
    np.testing.assert_array_equal(again.integers(0, 2**32, size=3, dtype=np.uint32),
                                  fresh.integers(0, 2**32, size=3, dtype=np.uint32))
    np.testing.assert_array_equal(again.random(4), fresh.random(4))
    np.testing.assert_array_equal(replica_rng(7, 4, 2, 1, reuse=gen).random(4), replica_rng(7, 4, 2, 1).random(4))
    with pytest.raises(ValueError, match="micro-batch -1"):
        replica_rng(7, 3, 2, -1)


def test_mixup_mixes_images_and_label_weights_in_the_same_proportion():
    x = np.stack([np.full((2, 2, 1), v, np.float32) for v in (0.0, 10.0, 20.0)])
    labels = np.array([0, 1, 2])
    rng = np.random.default_rng(3)
    mixed, targets = mixup(x, [(1.0, labels)], rng, alpha=0.2)
    (lam, y_a), (rest, y_b) = targets
    assert lam + rest == pytest.approx(1.0)
    np.testing.assert_array_equal(y_a, labels)
    np.testing.assert_allclose(mixed[:, 0, 0, 0], lam * x[:, 0, 0, 0] + rest * x[np.searchsorted(labels, y_b), 0, 0, 0],
                               rtol=1e-6)


def test_cutmix_pastes_a_box_and_weights_labels_by_area_kept():
    x = np.zeros((2, 10, 10, 1), np.float32)
    x[1] = 1.0
    mixed, targets = cutmix(x, [(1.0, np.array([0, 1]))], np.random.default_rng(0), keep=0.84)
    (kept, _), (pasted, y_b) = targets
    from_other = mixed[0].mean() if y_b[0] == 1 else 0.0
    assert kept + pasted == pytest.approx(1.0)
    assert 0.0 < pasted <= 0.16 + 1e-9
    if y_b[0] == 1:
        assert from_other == pytest.approx(pasted)


def test_mixed_cross_entropy_is_the_weighted_sum_of_its_terms():
    logits = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    ya, yb = np.array([0, 1, 2, 3]), np.array([4, 4, 0, 1])
    loss, d = mixed_cross_entropy(logits, [(0.3, ya), (0.7, yb)], 0.1)
    la, da = softmax_cross_entropy(logits, ya, 0.1)
    lb, db = softmax_cross_entropy(logits, yb, 0.1)
    assert loss == pytest.approx(0.3 * la + 0.7 * lb)
    np.testing.assert_allclose(d, 0.3 * da + 0.7 * db, rtol=1e-6)


def test_device_iterations_give_the_same_updates_as_one_step_per_host_call():
    data = [batch(2, 3, 4, seed=s) for s in range(6)]
    one, many = dense(), dense()
    single, grouped = engine_for(one), engine_for(many)
    stepwise = [single.train_step(x, y) for x, y in data]
    calls = grouped.train_steps(data[:4]) + grouped.train_steps(data[4:])  # 4 device iterations, then 2
    assert [m.loss for m in calls] == [m.loss for m in stepwise]
    assert [m.step for m in calls] == list(range(6)) and all(m.applied and m.samples == 24 for m in calls)
    for a, b in zip(one.params(), many.params()):
        np.testing.assert_array_equal(a.data, b.data)
    assert len(calls) == len(data)  # every step's metrics came back with its host call


def test_each_replica_reads_uint8_views_through_its_infeed():
    engine = engine_for(dense(), replicas=2, accum=3)
    images, labels = batch(2, 3, 4)
    feed, seen = engine.feeds[1], []
    read = feed.next

    def spy():
        x, y = read()
        seen.append(x)
        return x, y

    feed.next = spy
    engine.train_step(images, labels)
    assert len(seen) == 3 and all(x.dtype == np.uint8 and np.shares_memory(x, images) for x in seen)
    assert [np.array_equal(x, images[1, a]) for a, x in enumerate(seen)] == [True] * 3  # replica 1's, in order


def test_the_engine_says_where_the_update_time_went():
    engine = engine_for(dense(), replicas=2, accum=3)
    engine.train_step(*batch(2, 3, 4))
    seconds = engine.phase_seconds().seconds
    for phase in ("normalise", "model", "gradient_sum", "all_reduce", "optimizer", "metrics"):
        assert seconds[phase] > 0.0, phase
    assert seconds["input_wait"] == 0.0 and seconds["precision_emulation"] == 0.0  # the loop's; no emulation
