"""Learning-rate schedules: exact values, and the Graphcore G16 recipe's numbers."""

from __future__ import annotations

import math

import pytest

from models.optim.schedules import ScheduleConfig, lr_from_exponent, make_schedule


def test_polynomial_warmup_then_decay_exact_values():
    cfg = ScheduleConfig(kind="polynomial", base_lr=1.0, warmup_steps=10, power=2.0, end_ratio=0.01)
    s = make_schedule(cfg, steps_per_epoch=10, total_steps=110)
    assert s.lr_at(0) == 0.0
    assert s.lr_at(5) == 0.5
    assert s.lr_at(10) == 1.0
    assert s.lr_at(60) == pytest.approx(0.99 * 0.5**2 + 0.01, rel=1e-15)  # t/T = 50/100
    assert s.lr_at(110) == pytest.approx(0.01, rel=1e-15)
    assert s.lr_at(500) == pytest.approx(0.01, rel=1e-15)  # holds the end value


def test_polynomial_power_one_is_linear():
    s = make_schedule(ScheduleConfig(kind="polynomial", base_lr=2.0, power=1.0, end_ratio=0.0), 1, 4)
    assert [s.lr_at(i) for i in range(5)] == [2.0, 1.5, 1.0, 0.5, 0.0]


def graphcore_poly_lr(iteration, initial_lr, end_ratio, power, warmup_epochs, epochs, total):
    """Graphcore LR_Schedules/polynomial_decay_lr.py ``feed_dict_lr``, transcribed."""
    warmup = total * warmup_epochs // epochs
    end_lr = end_ratio * initial_lr
    if iteration <= warmup and warmup > 0:
        return iteration * initial_lr / warmup
    return (initial_lr - end_lr) * (1.0 - (iteration - warmup) / (total - warmup)) ** power + end_lr


def test_graphcore_g16_recipe_numbers():
    global_batch = 3 * 16 * 128  # micro-batch x GA x replicas (POD256)
    lr0 = lr_from_exponent(-9.5, global_batch)
    assert global_batch == 6144
    assert lr0 == pytest.approx(8.48528137, rel=1e-8)
    steps_per_epoch = 1_281_167 / global_batch
    total = int(350 * steps_per_epoch)
    assert total == 72_983
    cfg = ScheduleConfig(kind="polynomial", base_lr=lr0, warmup_epochs=70, power=2.0, end_ratio=1e-5)
    s = make_schedule(cfg, steps_per_epoch, total)
    assert s.warmup_steps == 14_596
    assert s.lr_at(14_596) == lr0
    assert s.lr_at(total) == pytest.approx(lr0 * 1e-5, rel=1e-12)
    for it in (0, 1, 7_298, 14_595, 14_597, 40_000, 72_982, 72_983):
        expected = graphcore_poly_lr(it, lr0, 1e-5, 2.0, 70, 350, total)
        assert s.lr_at(it) == pytest.approx(expected, rel=1e-13), it


def test_exponential_staircase_097_every_24_epochs():
    cfg = ScheduleConfig(kind="exponential", base_lr=0.256, decay_rate=0.97, decay_epochs=2.4)
    s = make_schedule(cfg, steps_per_epoch=100, total_steps=10_000)
    assert s.lr_at(0) == 0.256
    assert s.lr_at(239) == 0.256
    assert s.lr_at(240) == 0.256 * 0.97
    assert s.lr_at(479) == 0.256 * 0.97
    assert s.lr_at(480) == 0.256 * 0.97**2
    assert s.lr_at(2400) == pytest.approx(0.256 * 0.97**10, rel=1e-15)


def test_exponential_warmup_ramps_to_the_decayed_value():
    cfg = ScheduleConfig(kind="exponential", base_lr=0.256, warmup_epochs=5, decay_rate=0.97, decay_epochs=2.4)
    s = make_schedule(cfg, steps_per_epoch=100, total_steps=10_000)
    assert s.warmup_steps == 500
    assert s.lr_at(100) == pytest.approx(0.256 * 100 / 500, rel=1e-15)
    assert s.lr_at(250) == pytest.approx(0.256 * 0.97 * 250 / 500, rel=1e-15)
    assert s.lr_at(500) == pytest.approx(0.256 * 0.97**2, rel=1e-15)


def test_cosine_exact_values():
    s = make_schedule(ScheduleConfig(kind="cosine", base_lr=2.0, end_ratio=0.0), steps_per_epoch=10, total_steps=100)
    assert s.lr_at(0) == 2.0
    assert s.lr_at(25) == pytest.approx(1.0 + math.sqrt(0.5), rel=1e-15)
    assert s.lr_at(50) == pytest.approx(1.0, rel=1e-15)
    assert s.lr_at(100) == pytest.approx(0.0, abs=1e-15)


def test_cosine_with_warmup_and_end_ratio():
    cfg = ScheduleConfig(kind="cosine", base_lr=1.0, warmup_steps=20, end_ratio=0.1)
    s = make_schedule(cfg, steps_per_epoch=10, total_steps=120)
    assert s.lr_at(10) == 0.5
    assert s.lr_at(70) == pytest.approx(0.1 + 0.9 * 0.5, rel=1e-15)
    assert s.lr_at(120) == pytest.approx(0.1, rel=1e-15)


def test_constant_with_warmup_epochs():
    s = make_schedule(ScheduleConfig(kind="constant", base_lr=0.4, warmup_epochs=2), steps_per_epoch=5, total_steps=50)
    assert [s.lr_at(i) for i in (0, 5, 10, 11, 49)] == [0.0, 0.2, 0.4, 0.4, 0.4]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"kind": "step"}, "schedule.kind"), ({"base_lr": 0.0}, "schedule.base_lr"),
     ({"warmup_steps": 3, "warmup_epochs": 1.0}, "not both"), ({"end_ratio": 1.5}, "schedule.end_ratio"),
     ({"decay_rate": 0.0}, "schedule.decay_rate"), ({"power": -1.0}, "schedule.power")],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScheduleConfig(**kwargs)


def test_warmup_longer_than_run_is_rejected():
    with pytest.raises(ValueError, match="nothing to decay"):
        make_schedule(ScheduleConfig(kind="polynomial", warmup_epochs=10), steps_per_epoch=10, total_steps=100)


def test_negative_step_is_rejected():
    s = make_schedule(ScheduleConfig(), 10, 100)
    with pytest.raises(ValueError, match="update_step"):
        s.lr_at(-1)
