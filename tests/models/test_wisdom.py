"""Kernel wisdom: a choice measured once per machine and shape, recorded, and taken from then on."""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest

from models.kernels import wisdom as W


class FakeClock:
    """time.thread_time for wisdom's measurements, advanced by the candidates themselves."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def wisdom(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("POPRUN_WISDOM", str(path))
    monkeypatch.setattr(W, "_known", {})
    monkeypatch.setattr(W, "_taken", {})
    monkeypatch.setattr(W, "_used", {})
    clock = FakeClock()
    monkeypatch.setattr(W.time, "thread_time", clock)
    return path, clock


def candidates(clock, costs: dict, calls: list):
    def run(name):
        calls.append(name)
        clock.now += costs[name]

    return {name: (lambda name=name: run(name)) for name in costs}


def test_the_fastest_is_measured_once_recorded_and_taken_from_then_on(wisdom):
    path, clock = wisdom
    calls = []
    assert W.choose("k", (4, 8), candidates(clock, {"hand": 3.0, "blas": 1.0}, calls), "hand") == "blas"
    assert calls.count("hand") == calls.count("blas") == W.REPEATS + 1  # a warm-up, then the best of REPEATS
    entry = json.loads(path.read_text())["machines"][W.machine()]["k 4x8 hand/blas"]
    assert entry == {"choice": "blas", "ms": {"hand": 3000.0, "blas": 1000.0}}
    calls.clear()
    assert W.choose("k", (4, 8), candidates(clock, {"hand": 0.0, "blas": 9.0}, calls), "hand") == "blas"
    assert calls == []  # recorded: not measured again, whatever the candidates would take now
    assert W.used() == {"k 4x8 hand/blas": entry}


def test_a_new_process_reads_the_choice_back_and_measures_nothing(wisdom, monkeypatch):
    path, clock = wisdom
    W.choose("k", (2,), candidates(clock, {"hand": 1.0, "blas": 2.0}, []), "blas")
    W.forget()  # as a later run would start
    calls = []
    assert W.choose("k", (2,), candidates(clock, {"hand": 5.0, "blas": 0.0}, calls), "blas") == "hand"
    assert calls == []


def test_ties_go_to_the_first_candidate_and_shapes_are_apart(wisdom):
    _, clock = wisdom
    assert W.choose("k", (1,), candidates(clock, {"hand": 1.0, "blas": 1.0}, []), "blas") == "hand"
    assert W.choose("k", (2,), candidates(clock, {"hand": 2.0, "blas": 1.0}, []), "hand") == "blas"
    assert W.choose("j", (2,), candidates(clock, {"hand": 1.0, "blas": 2.0}, []), "blas") == "hand"


def test_off_takes_the_rule_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("POPRUN_WISDOM", "off")
    calls = []
    assert W.choose("k", (3,), candidates(FakeClock(), {"hand": 1.0, "blas": 2.0}, calls), "blas") == "blas"
    assert calls == [] and not list(tmp_path.iterdir())


def test_a_damaged_file_is_named_with_the_fix(wisdom):
    path, clock = wisdom
    path.write_text("{not json")
    with pytest.raises(RuntimeError, match=r"wisdom\.json: unreadable .* delete it .* POPRUN_WISDOM"):
        W.choose("k", (1,), candidates(clock, {"hand": 1.0, "blas": 2.0}, []), "blas")


def _choose_in_child(path, log, barrier):
    import os

    os.environ["POPRUN_WISDOM"] = str(path)
    barrier.wait()

    def record():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")

    print(W.choose("k", (7,), {"hand": record, "blas": record}, "blas"))


def test_instances_started_together_measure_once(tmp_path):
    """Two processes meeting the same shape at once: one measures under the lock, the other reads its choice."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    log = tmp_path / "measured"
    procs = [ctx.Process(target=_choose_in_child, args=(tmp_path / "w.json", log, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(set(log.read_text().split())) == 1  # one process ran the candidates
    assert len(json.loads((tmp_path / "w.json").read_text())["machines"][W.machine()]) == 1


def test_a_pointwise_convolution_takes_the_recorded_choice_on_every_run(wisdom, monkeypatch):
    from models.conv import Conv2d

    path, _ = wisdom
    monkeypatch.setattr(W.time, "thread_time", __import__("time").thread_time)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 16, 16, 32)).astype(np.float32)
    conv = Conv2d("c", "b", 32, 48, 1, 1, "symmetric", 1)
    runs = []
    for _ in range(2):
        runs.append(conv.forward(x, True).copy())
        W.forget()  # the next run reads the file
    np.testing.assert_array_equal(runs[0], runs[1])
    recorded = json.loads(path.read_text())["machines"][W.machine()]
    assert list(recorded) == ["conv1x1.forward 1024x32x48 pointwise/blas"]
    np.testing.assert_allclose(runs[0].reshape(-1, 48), x.reshape(-1, 32) @ conv.weight.data.reshape(48, 32).T, rtol=1e-5, atol=1e-5)


def test_a_grouped_convolution_runs_the_path_recorded_for_its_shape(wisdom, monkeypatch):
    """A G16 layer's first training forward measures the direct kernels against im2col + GEMM; it then
    computes what a layer fixed to the recorded path computes, bit for bit, its gradients untouched."""
    from models.conv import Conv2d

    path, _ = wisdom
    monkeypatch.setattr(W.time, "thread_time", __import__("time").thread_time)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 6, 32)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 3, 32)).astype(np.float32)
    layers = [Conv2d("c", "b", 32, 32, 3, 2, "same", 2, rng=np.random.default_rng(1)) for _ in range(2)]
    for layer in layers:
        layer.weight.grad[...] = 7.0
    y = layers[0].forward(x, True).copy()
    (key, entry), = json.loads(path.read_text())["machines"][W.machine()].items()
    assert key.startswith("conv.grouped 2x6x6x32x32x3x3x2x2x2x") and entry["choice"] in ("direct", "im2col")
    assert layers[0].path == entry["choice"] and (layers[0].weight.grad == 7.0).all()
    monkeypatch.setenv("POPRUN_WISDOM", "off")
    layers[1].path, layers[1]._path_chosen = entry["choice"], True
    np.testing.assert_array_equal(y, layers[1].forward(x, True))
    np.testing.assert_array_equal(layers[0].backward(dy), layers[1].backward(dy))
    np.testing.assert_array_equal(layers[0].weight.grad, layers[1].weight.grad)


def test_a_models_first_run_on_a_machine_computes_the_bits_of_every_later_run(wisdom, monkeypatch):
    """The first training step measures every shape (layers tried and put back) and the next run reads
    the choices: both give the same loss gradients, bit for bit, and the file lists the model's shapes."""
    from models import build_model, softmax_cross_entropy

    path, _ = wisdom
    monkeypatch.setattr(W.time, "thread_time", __import__("time").thread_time)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 10, 4)
    grads = []
    for _ in range(2):
        model = build_model("efficientnet-tiny-g16-gn", num_classes=10, resolution=32)
        _, dlogits = softmax_cross_entropy(model.forward(x, True), labels)
        model.backward(dlogits, need_dx=False)
        grads.append([p.grad.copy() for p in model.params()])
        W.forget()  # the next run reads the file
    for first, later in zip(*grads):
        np.testing.assert_array_equal(first, later)
    kinds = {key.split()[0] for key in json.loads(path.read_text())["machines"][W.machine()]}
    assert {"conv1x1.forward", "conv1x1.input_grad", "conv1x1.weight_grad", "conv.grouped"} <= kinds


def test_the_candidates_are_timed_on_one_thread_and_the_count_comes_back(wisdom):
    from models.kernels import threads as _threads

    _, clock = wisdom
    before, seen = _threads.get_num_threads(), []

    def note():
        seen.append(_threads.get_num_threads())
        clock.now += 1.0

    W.choose("k", (5,), {"hand": note, "blas": note}, "blas")
    assert set(seen) == {1} and _threads.get_num_threads() == before


@pytest.mark.parametrize("shape,kernel,stride", [((2, 6, 6, 64), 3, 1), ((2, 9, 9, 32), 5, 2), ((1, 12, 12, 32), 1, 1)])
def test_the_grouped_weight_gradient_formulations_agree(monkeypatch, shape, kernel, stride):
    """By-group, chunked and im2col + GEMM compute the same weight gradient (float64, to rounding)."""
    from models.conv import Conv2d

    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    layer = Conv2d("c", "b", shape[3], shape[3], kernel, stride, "same", shape[3] // 16, dtype=np.float64,
                   rng=np.random.default_rng(4))
    dy = rng.standard_normal(layer.out_shape(shape))
    grads = {}
    for name in ("small_map", "direct", "im2col"):
        monkeypatch.setattr(W, "choose", lambda kind, key, candidates, rule, name=name:
                            name if kind == "conv.weight_grad" and name in candidates else rule)
        layer.forward(x, True)
        layer.backward(dy)
        grads[name] = layer.weight.grad.copy()
    np.testing.assert_allclose(grads["direct"], grads["im2col"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(grads["small_map"], grads["im2col"], rtol=1e-10, atol=1e-10)


def test_a_choice_met_inside_a_measured_candidate_takes_its_rule(wisdom):
    _, clock = wisdom
    inner = []

    def outer():
        inner.append(W.choose("inner", (1,), {"a": lambda: None, "b": lambda: None}, "b"))
        clock.now += 1.0

    W.choose("outer", (1,), {"x": outer, "y": outer}, "y")
    assert set(inner) == {"b"} and "inner 1 a/b" not in W.used()


def test_the_command_lists_this_machines_choices_and_forgets_them(wisdom, capsys):
    from models import wisdom as command

    path, clock = wisdom
    W.choose("k", (4,), candidates(clock, {"hand": 2.0, "blas": 1.0}, []), "hand")
    assert command.main([]) == 0
    out = capsys.readouterr().out
    assert str(path) in out and "1 choices" in out and "k 4 hand/blas" in out and "blas" in out
    assert command.main(["--forget"]) == 0 and "dropped 1 choices" in capsys.readouterr().out
    assert W.recorded() == {}
    calls = []
    W.choose("k", (4,), candidates(clock, {"hand": 1.0, "blas": 2.0}, calls), "blas")
    assert calls  # measured again
