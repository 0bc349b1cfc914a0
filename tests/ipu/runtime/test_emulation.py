"""Float16 emulation in the engine (``ipu.emulate_precision``): what is rounded, where, and how."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.runtime.emulation import HalfRounder, PrecisionEmulation
from ipu.runtime.engine import Engine
from ipu.runtime.replica import DeviceOps, SingleIpuReplica
from models import build_model
from models.optim.loss_scaling import LossScaleConfig, LossScaler
from models.optim import OptimConfig, make_optimizer
from models.optim.schedules import ScheduleConfig, make_schedule
from poprun_py.comm import LoopbackComm
from ipu.runtime.streams import ReplicaFeed
from tests.ipu.oracles import is_float16, rounding_seed

MEAN, STD = (100.0,), (50.0,)


def dense(seed=0):
    return build_model("dense-mnist", 10, seed=seed, hidden=[8], resolution=4, in_channels=1)


def batch(replicas=2, accum=2, micro=8, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (replicas, accum, micro, 4, 4, 1), dtype=np.uint8)
    return images, rng.integers(0, 10, (replicas, accum, micro))


def engine_for(model, precision=None, lr=0.1, momentum=0.9, stochastic=True, replicas=2, accum=2):
    """An engine over ``model``; ``precision`` None: no emulation (float32 throughout)."""
    opt = make_optimizer(OptimConfig(name="sgd", momentum=momentum), model.params())
    half = precision is not None
    reps = [SingleIpuReplica(model, i, DeviceOps(MEAN, STD, seed=1), half=HalfRounder() if half else None)
            for i in range(replicas)]
    emulation = PrecisionEmulation(precision, model.params(), opt, seed=3, stochastic_rounding=stochastic) \
        if half else None
    engine = Engine(model, opt, make_schedule(ScheduleConfig(kind="constant", base_lr=lr), 10, 10_000),
                    LoopbackComm(), reps, grad_accum=accum, total_replicas=replicas,
                    scaler=LossScaler(LossScaleConfig(kind="static", initial_scale=128.0)), emulation=emulation)
    engine.broadcast_initial_state()
    return engine


def test_16_16_stores_every_weight_and_momentum_as_float16_after_each_update():
    model = dense()
    engine = engine_for(model, "16.16")
    assert all(is_float16(p.data) for p in model.params())  # stored in float16 from the start
    for step in range(5):
        engine.train_step(*batch(seed=step))
        for p in model.params():
            assert is_float16(p.data), (step, p.name)
            assert is_float16(engine.optimizer.state[p.name]["momentum"]), (step, p.name)
    assert any(np.any(engine.optimizer.state[p.name]["momentum"]) for p in model.params())


def test_stochastic_rounding_is_seeded_by_run_seed_update_and_parameter_only():
    a, b = dense(), dense()
    ea, eb = engine_for(a, "16.16"), engine_for(b, "16.16")
    for step in range(3):
        ea.train_step(*batch(seed=step))
        eb.train_step(*batch(seed=step))
    for pa, pb in zip(a.params(), b.params()):
        np.testing.assert_array_equal(pa.data, pb.data)
    seeds = {rounding_seed(0, u, i) for u in range(50) for i in range(50)}
    assert len(seeds) == 2500 and rounding_seed(1, 0, 0) != rounding_seed(0, 0, 0)


def _displacement(precision, stochastic, steps, lr):
    model = dense()
    rng = np.random.default_rng(7)
    for p in model.params():  # |w| in [0.5, 1): one float16 ulp is 2**-11, half an ulp 2.4e-4
        p.data[...] = (rng.uniform(0.5, 1.0, p.data.shape) * rng.choice([-1, 1], p.data.shape)).astype(np.float16)
    start = [p.data.copy() for p in model.params()]
    engine = engine_for(model, precision, lr=lr, momentum=0.0, stochastic=stochastic)
    images, labels = batch(seed=11)
    losses = [engine.train_step(images, labels).loss for _ in range(steps)]
    moved = np.concatenate([(p.data - w0).ravel() for p, w0 in zip(model.params(), start)])
    return moved, losses, max(float(np.abs(p.grad).max()) for p in model.params())  # the last mean gradient


def test_stochastic_rounding_keeps_learning_where_round_to_nearest_stalls():
    lr, steps = 5e-5, 400
    reference, ref_losses, max_grad = _displacement("16.32", True, steps, lr)  # float32 masters
    assert lr * max_grad < 2.0 ** -12, "premise: every update is below half a float16 ulp of its weight"
    nearest, rn_losses, _ = _displacement("16.16", False, steps, lr)
    assert not np.any(nearest) and rn_losses[-1] == rn_losses[0]  # round to nearest: nothing moves
    stochastic, sr_losses, _ = _displacement("16.16", True, steps, lr)
    assert ref_losses[-1] < ref_losses[0] and sr_losses[-1] < sr_losses[0]
    # unbiased: the stochastic walk follows the float32 one on average
    assert np.corrcoef(stochastic, reference)[0, 1] > 0.5
    gain = float(stochastic @ reference / (reference @ reference))
    assert 0.8 < gain < 1.2, gain


def test_16_32_keeps_float32_masters_but_computes_with_float16_weights_and_input():
    model, plain = dense(), dense()
    engine, reference = engine_for(model, "16.32"), engine_for(plain)
    images, labels = batch()
    half, full = engine.train_step(images, labels), reference.train_step(images, labels)
    assert half.loss != full.loss and abs(half.loss - full.loss) < 1e-2 * full.loss  # float16-sized
    assert not all(is_float16(p.data) for p in model.params())  # the masters stay float32
    masters = [p.data.copy() for p in model.params()]
    x = ((images[0, 0].astype(np.float32) - MEAN[0]) / STD[0])
    logits32 = model.forward(x, training=False)
    with engine.emulation.compute_weights():
        assert all(is_float16(p.data) for p in model.params())
        logits16 = model.forward(HalfRounder().round_(x.copy()), training=False)
    for p, w in zip(model.params(), masters):
        np.testing.assert_array_equal(p.data, w)  # restored bitwise
    diff = np.abs(logits16 - logits32)
    assert 0 < diff.max() < 2.0 ** -8 * max(1.0, np.abs(logits32).max())


def test_gradient_partials_are_float16_before_accumulation():
    model = dense()
    engine = engine_for(model, "16.32", replicas=1, accum=1)
    grads = [np.zeros_like(p.data, dtype=np.float64) for p in model.params()]
    images, labels = batch(1, 1)
    with engine.emulation.compute_weights():
        engine.replicas[0].run_from(ReplicaFeed([(images[0], labels[0])]), step=0, grads=grads, loss_scale=128.0)
    assert all(is_float16(g.astype(np.float32)) for g in grads) and any(np.any(g) for g in grads)


def test_emulating_32_32_is_refused_with_the_fix():
    model = dense()
    opt = make_optimizer(OptimConfig(name="sgd"), model.params())
    with pytest.raises(ValueError, match="use 16.32 or 16.16"):
        PrecisionEmulation("32.32", model.params(), opt, seed=0)


def test_the_rounder_rounds_to_nearest_in_place_like_numpys_cast():
    r = HalfRounder()
    x = np.array([1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 65519.0, 65520.0, -1e-9, 2.0 ** -25 * 3, np.nan],
                 np.float32)
    assert r.round_(x) is x
    np.testing.assert_array_equal(x, [1.0, 1.0 + 2.0 ** -9, 65504.0, np.inf, -0.0, 2.0 ** -23, np.nan])
    rng = np.random.default_rng(0)
    y = (rng.standard_normal(100_000) * 10.0 ** rng.uniform(-9, 5, 100_000)).astype(np.float32)
    with np.errstate(over="ignore"):
        want = y.astype(np.float16).astype(np.float32)
    strided = y.copy().reshape(-1, 2).T  # not contiguous: numpy's cast
    np.testing.assert_array_equal(r.round_(y), want)  # subnormals, overflow, ties: as numpy's cast
    np.testing.assert_array_equal(r.round_(strided), want.reshape(-1, 2).T)
    with pytest.raises(ValueError, match="float32"):
        r.round_(np.ones(2))


def test_pipelined_replicas_add_float16_partials_too():
    """Each micro-batch's partials are rounded to float16 before they are added, as on one IPU."""
    from ipu.runtime.replica import PipelinedIpuReplica

    model = dense()
    images, labels = batch(1, 4)
    sums = []
    for replica in (PipelinedIpuReplica(model, 0, DeviceOps(MEAN, STD, seed=1), ["fc2"], half=HalfRounder()),
                    SingleIpuReplica(model, 0, DeviceOps(MEAN, STD, seed=1), half=HalfRounder())):
        grads = [np.zeros_like(p.data, dtype=np.float64) for p in model.params()]
        replica.run_from(ReplicaFeed([(images[0], labels[0])]), step=0, grads=grads, loss_scale=128.0)
        sums.append(grads)
    for a, b in zip(*sums):
        np.testing.assert_array_equal(a, b)
    assert any(np.any(g) for g in sums[0])
    one = [np.zeros_like(p.data, dtype=np.float64) for p in model.params()]
    replica = PipelinedIpuReplica(model, 0, DeviceOps(MEAN, STD, seed=1), ["fc2"], "sequential", half=HalfRounder())
    feed = ReplicaFeed([(images[0][:1].repeat(4, 0), labels[0][:1].repeat(4, 0))])
    replica.run_from(feed, step=0, grads=one, loss_scale=128.0)
    assert all(is_float16((g / 4).astype(np.float32)) for g in one)  # 4 equal float16 partials


def test_16_16_computes_with_its_stored_weights_as_they_are(monkeypatch):
    """16.16 skips rounding the weights before each step (they are float16 values already): the
    same losses and weights, bitwise, as a run that rounds them again."""
    skipping, rounding = dense(), dense()
    e_skip, e_round = engine_for(skipping, "16.16"), engine_for(rounding, "16.16")
    e_round.emulation.__class__ = type("Rerounding", (PrecisionEmulation,), {"stores_half": property(lambda self: False)})
    assert e_skip.emulation.stores_half and not e_round.emulation.stores_half
    calls = []
    monkeypatch.setattr(e_skip.emulation, "round_for_compute", lambda: calls.append(1))
    for step in range(4):
        a, b = e_skip.train_step(*batch(seed=step)), e_round.train_step(*batch(seed=step))
        assert a.loss == b.loss
    assert not calls
    for p, q in zip(skipping.params(), rounding.params()):
        np.testing.assert_array_equal(p.data, q.data)


def test_a_restored_checkpoint_is_stored_as_float16_under_16_16():
    from types import SimpleNamespace

    from launch.train.checkpoint import capture_state, restore_state

    model = dense()
    engine = engine_for(model, "16.16")
    loader = SimpleNamespace(state=lambda: {}, load_state=lambda state: None)
    t = SimpleNamespace(engine=engine, loader=loader, run_id="r", cfg=SimpleNamespace(to_dict=dict, run=SimpleNamespace(seed=3)))
    arrays, meta = capture_state(t, {})
    arrays = {k: v.copy() for k, v in arrays.items()}
    for key in arrays:
        if key.startswith("model/"):
            arrays[key] += np.float32(1e-4)  # a float32 run's weights: not float16 values
    assert not all(is_float16(v) for k, v in arrays.items() if k.startswith("model/"))
    restore_state(t, arrays, meta)
    assert all(is_float16(p.data) for p in model.params())
