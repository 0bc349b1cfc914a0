"""Optimizer updates against hand-computed numbers, the TF formulas and torch.optim."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from models.optim import OptimConfig, lars_trust_ratio, make_optimizer
from models.param import Param

LRS = [0.5, 0.3, 0.3, 0.1, 0.05]  # a changing rate, as a schedule would pass


def make_params(seed: int = 0, dtype=np.float64) -> list[Param]:
    """A conv kernel, a dense kernel, a norm scale and a bias, with random values and grads."""
    rng = np.random.default_rng(seed)
    shapes = [("conv.weight", (4, 3, 3, 3), "weight"), ("fc.weight", (5, 6), "weight"),
              ("norm.weight", (4,), "norm_scale"), ("fc.bias", (5,), "bias")]
    params = [Param(name, rng.standard_normal(shape).astype(dtype), kind) for name, shape, kind in shapes]
    return params


def set_grads(params: list[Param], step: int) -> None:
    rng = np.random.default_rng(1000 + step)
    for p in params:
        p.grad[...] = rng.standard_normal(p.data.shape)


# ---------------------------------------------------------------- LARS

def test_trust_ratio_exact_values():
    assert lars_trust_ratio(3.0, 4.0, 0.001, 0.5, 0.1) == 0.001 * 3.0 / (4.0 + 1.5 + 0.1)
    assert lars_trust_ratio(0.0, 4.0, 0.001, 0.5, 0.1) == 1.0
    assert lars_trust_ratio(3.0, 0.0, 0.001, 0.5, 0.1) == 1.0


def test_lars_two_steps_by_hand():
    # w = [3, 4] (norm 5), g = [0.6, 0.8] (norm 1), eta 0.01, wd 0.1, m 0.9, lr 3.
    w = Param("conv.weight", np.array([3.0, 4.0]))
    b = Param("conv.bias", np.array([1.0, -2.0]), kind="bias")
    opt = make_optimizer(OptimConfig(name="lars", momentum=0.9, weight_decay=0.1, lars_eta=0.01), [w, b])
    w.grad[...] = [0.6, 0.8]
    b.grad[...] = [0.5, 0.5]
    opt.step(3.0)
    # trust = 0.01*5/(1 + 0.1*5) = 1/30; g' = [0.9, 1.2]; v = 3/30 * g' = [0.09, 0.12]
    np.testing.assert_allclose(w.data, [2.91, 3.88], rtol=0, atol=1e-15)
    # excluded bias: plain momentum, no decay, no trust: v = 3*0.5
    np.testing.assert_allclose(b.data, [-0.5, -3.5], rtol=0, atol=1e-15)
    opt.step(3.0)
    # ||w|| = 4.85; trust = 0.0485/1.485; g' = [0.891, 1.188] = 1.485*[0.6, 0.8]
    # u = 3*0.0485*[0.6, 0.8] = [0.0873, 0.1164]; v = 0.9*[0.09, 0.12] + u
    np.testing.assert_allclose(opt.state["conv.weight"]["momentum"], [0.1683, 0.2244], rtol=1e-13)
    np.testing.assert_allclose(w.data, [2.7417, 3.6556], rtol=1e-13)
    np.testing.assert_allclose(b.data, [-0.5 - 2.85, -3.5 - 2.85], rtol=1e-13)  # v = 0.9*1.5 + 1.5


def tf_lars_reference(params, grads_per_step, lrs, momentum, wd, eta, eps, skip=("bias", "norm")):
    """A literal float64 transcription of TF's LARSOptimizer (compute_lr + ApplyMomentum(lr=1))."""
    ws = {name: w.astype(np.float64).copy() for name, w in params.items()}
    moms = {name: np.zeros_like(w) for name, w in ws.items()}
    for grads, lr in zip(grads_per_step, lrs):
        for name, var in ws.items():
            grad = grads[name].astype(np.float64)
            scaled_lr = lr
            if not any(s in name for s in skip):
                w_norm, g_norm = np.linalg.norm(var), np.linalg.norm(grad)
                trust = np.where(w_norm > 0, np.where(g_norm > 0, eta * w_norm / (g_norm + wd * w_norm + eps), 1.0), 1.0)
                scaled_lr = lr * trust
                grad = grad + wd * var
            moms[name] = moms[name] * momentum + grad * scaled_lr  # ApplyMomentum, lr = 1
            ws[name] = ws[name] - moms[name]
    return ws


@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_lars_matches_tf_formula_over_steps(eps):
    params = make_params()
    start = {p.name: p.data.copy() for p in params}
    cfg = OptimConfig(name="lars", momentum=0.885, weight_decay=2.5e-2, lars_eta=0.02, lars_epsilon=eps)
    opt = make_optimizer(cfg, params)
    history = []
    for step, lr in enumerate(LRS):
        set_grads(params, step)
        history.append({p.name: p.grad.copy() for p in params})
        opt.step(lr)
    expected = tf_lars_reference(start, history, LRS, 0.885, 2.5e-2, 0.02, eps)
    for p in params:
        np.testing.assert_allclose(p.data, expected[p.name], rtol=1e-12, atol=1e-14)


def test_lars_float16_weights_take_norms_in_float32():
    # 300^2 overflows float16 (max 65504): a float16 norm would be inf and the trust ratio 0.
    w = Param("conv.weight", np.full((8, 8), 300.0, dtype=np.float16))
    w.grad[...] = np.float16(0.25)
    opt = make_optimizer(OptimConfig(name="lars", momentum=0.0, weight_decay=0.0, lars_eta=0.001), [w])
    trust = opt.trust_ratio(w)
    assert trust == pytest.approx(0.001 * 2400.0 / 2.0, rel=1e-6)
    opt.step(1.0)
    assert w.data.dtype == np.float16
    np.testing.assert_allclose(w.data.astype(np.float64), 300.0 - 1.2 * 0.25, rtol=1e-3)


def test_lars_excluded_params_ignore_weight_decay_and_trust():
    params = make_params()
    lars = make_optimizer(OptimConfig(name="lars", momentum=0.9, weight_decay=0.5), params)
    plain = [Param(p.name, p.data.copy(), p.kind) for p in params]
    sgd = make_optimizer(OptimConfig(name="sgd", momentum=0.9), plain)
    for step, lr in enumerate(LRS):
        set_grads(params, step)
        set_grads(plain, step)
        lars.step(lr)
        sgd.step(lr)
    for p, q in zip(params, plain):
        if p.decays:
            assert not np.allclose(p.data, q.data)
        else:
            np.testing.assert_array_equal(p.data, q.data)


# ---------------------------------------------------------------- SGD, Nesterov (vs torch)

def torch_groups(torch, params, weight_decay):
    """torch tensors for ``params``, with weight decay only on decaying ones (our exemption)."""
    tensors = [torch.tensor(p.data.copy(), requires_grad=True) for p in params]
    decay = [t for t, p in zip(tensors, params) if p.decays]
    no_decay = [t for t, p in zip(tensors, params) if not p.decays]
    return tensors, [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def run_against_torch(name, torch_cls, torch_kwargs, cfg, lrs, dtype=np.float64):
    torch = pytest.importorskip("torch")
    params = make_params(dtype=dtype)
    tensors, groups = torch_groups(torch, params, cfg.weight_decay)
    ref = getattr(torch.optim, torch_cls)(groups, lr=lrs[0], **torch_kwargs)
    opt = make_optimizer(cfg, params)
    for step, lr in enumerate(lrs):
        set_grads(params, step)
        for t, p in zip(tensors, params):
            t.grad = torch.tensor(p.grad.copy())
        for group in ref.param_groups:
            group["lr"] = lr
        ref.step()
        opt.step(lr)
    tol = {"rtol": 1e-12, "atol": 1e-13} if dtype == np.float64 else {"rtol": 2e-6, "atol": 2e-6}
    for t, p in zip(tensors, params):
        assert p.data.dtype == dtype
        np.testing.assert_allclose(p.data, t.detach().numpy(), **tol, err_msg=f"{name} {p.name}")


@pytest.mark.parametrize("nesterov, dtype", [(False, np.float64), (True, np.float64), (False, np.float32)])
def test_sgd_matches_torch_at_constant_lr(nesterov, dtype):
    cfg = OptimConfig(name="nesterov" if nesterov else "sgd", momentum=0.9, weight_decay=1e-2)
    run_against_torch("sgd", "SGD", {"momentum": 0.9, "nesterov": nesterov}, cfg, [0.1] * 5, dtype)


def test_sgd_keeps_lr_inside_velocity_when_lr_changes():
    # TF form: v = m v + lr g, w -= v.  torch would give v = m v + g, w -= lr v.
    p = Param("fc.weight", np.array([1.0]))
    opt = make_optimizer(OptimConfig(name="sgd", momentum=0.5), [p])
    p.grad[...] = 1.0
    opt.step(1.0)  # v = 1,          w = 0
    opt.step(0.1)  # v = 0.5 + 0.1,  w = -0.6   (torch: v = 1.5, w = -0.15)
    np.testing.assert_allclose(p.data, [-0.6], rtol=1e-15)


# ---------------------------------------------------------------- Adam, AdamW (vs torch)

def test_adam_matches_torch():
    cfg = OptimConfig(name="adam", betas=(0.9, 0.99), eps=1e-6, weight_decay=1e-2)
    run_against_torch("adam", "Adam", {"betas": (0.9, 0.99), "eps": 1e-6}, cfg, LRS)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adamw_matches_torch(dtype):
    cfg = OptimConfig(name="adamw", betas=(0.8, 0.999), eps=1e-8, weight_decay=0.1)
    run_against_torch("adamw", "AdamW", {"betas": (0.8, 0.999), "eps": 1e-8}, cfg, LRS, dtype)


def test_adam_first_step_by_hand():
    # t = 1: m_hat = g, s_hat = g^2, so w -= lr * g / (|g| + eps) = lr * sign(g) (eps tiny)
    p = Param("fc.weight", np.array([1.0, 1.0]))
    opt = make_optimizer(OptimConfig(name="adam", eps=1e-12), [p])
    p.grad[...] = [4.0, -0.25]
    opt.step(0.1)
    np.testing.assert_allclose(p.data, [0.9, 1.1], rtol=1e-10)


# ---------------------------------------------------------------- RMSProp (TF1 form)

def tf_rmsprop_reference(w, grads_per_step, lrs, rho, momentum, eps, wd, decays, ms0=1.0):
    """TF1 ApplyRMSProp in float64: ms = rho ms + (1-rho) g^2; mom = m mom + lr g/sqrt(ms+eps)."""
    w = w.astype(np.float64).copy()
    ms, mom = np.full_like(w, ms0), np.zeros_like(w)
    for g, lr in zip(grads_per_step, lrs):
        g = g + wd * w if decays else g
        ms = rho * ms + (1 - rho) * g * g
        mom = momentum * mom + lr * g / np.sqrt(ms + eps)
        w = w - mom
    return w


def test_rmsprop_first_step_by_hand():
    # ms0 = 1: ms = 0.9 + 0.1*4 = 1.3; sqrt(1.3 + 0.14) = 1.2; mom = 0.6*2/1.2 = 1; w = 5 - 1
    p = Param("fc.weight", np.array([5.0]))
    opt = make_optimizer(OptimConfig(name="rmsprop", rho=0.9, momentum=0.9, eps=0.14), [p])
    p.grad[...] = 2.0
    opt.step(0.6)
    np.testing.assert_allclose(p.data, [4.0], rtol=1e-15)
    np.testing.assert_allclose(opt.state["fc.weight"]["mean_square"], [1.3], rtol=1e-15)


@pytest.mark.parametrize("ms0", [1.0, 0.0])
def test_rmsprop_matches_tf_formula(ms0):
    params = make_params()
    start = {p.name: p.data.copy() for p in params}
    cfg = OptimConfig(name="rmsprop", rho=0.9, momentum=0.9, eps=1e-3, weight_decay=1e-2, rmsprop_initial_ms=ms0)
    opt = make_optimizer(cfg, params)
    history = []
    for step, lr in enumerate(LRS):
        set_grads(params, step)
        history.append({p.name: p.grad.copy() for p in params})
        opt.step(lr)
    for p in params:
        grads = [h[p.name] for h in history]
        expected = tf_rmsprop_reference(start[p.name], grads, LRS, 0.9, 0.9, 1e-3, 1e-2, p.decays, ms0)
        np.testing.assert_allclose(p.data, expected, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- shared behaviour

@pytest.mark.parametrize("name", ["sgd", "nesterov", "lars", "adam", "adamw", "rmsprop"])
def test_state_dict_round_trip_resumes_exactly(name):
    cfg = OptimConfig(name=name, weight_decay=1e-3)
    a = make_params()
    opt_a = make_optimizer(cfg, a)
    for step in range(2):
        set_grads(a, step)
        opt_a.step(0.1)
    saved = opt_a.state_dict()
    assert saved["step"] == 2
    assert all(isinstance(v, (int, float, np.ndarray)) for v in saved.values())
    assert all(k == "step" or "/" in k for k in saved)
    b = [Param(p.name, p.data.copy(), p.kind) for p in a]
    opt_b = make_optimizer(cfg, b)
    opt_b.load_state_dict(saved)
    for step in range(2, 5):
        set_grads(a, step)
        set_grads(b, step)
        opt_a.step(0.1)
        opt_b.step(0.1)
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.data, q.data)


def test_state_dict_keys_are_flat_slot_slash_name():
    params = make_params()
    keys = set(make_optimizer(OptimConfig(name="adam"), params).state_dict())
    assert "exp_avg/conv.weight" in keys and "exp_avg_sq/fc.bias" in keys and "step" in keys


def test_load_state_dict_rejects_other_models():
    params = make_params()
    opt = make_optimizer(OptimConfig(name="sgd"), params)
    saved = opt.state_dict()
    del saved["momentum/fc.bias"]
    with pytest.raises(ValueError, match="missing keys.*momentum/fc.bias"):
        opt.load_state_dict(saved)
    saved = opt.state_dict()
    saved["momentum/fc.bias"] = np.zeros(7)
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(saved)


@pytest.mark.parametrize("name", ["sgd", "lars", "adam", "rmsprop"])
def test_step_leaves_grads_alone(name):
    params = make_params()
    opt = make_optimizer(OptimConfig(name=name, weight_decay=0.1), params)
    set_grads(params, 0)
    before = [p.grad.copy() for p in params]
    opt.step(0.1)
    for p, g in zip(params, before):
        np.testing.assert_array_equal(p.grad, g)


@pytest.mark.parametrize("name", ["nesterov", "lars", "adamw", "rmsprop"])
def test_step_allocates_no_parameter_sized_arrays(name):
    big = [Param("fc.weight", np.ones((256, 256), np.float32)), Param("fc.bias", np.ones(256, np.float32), "bias")]
    opt = make_optimizer(OptimConfig(name=name, weight_decay=0.1), big)
    big[0].grad[...] = 0.5
    opt.step(0.1)  # warm up
    tracemalloc.start()
    opt.step(0.1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < big[0].data.nbytes // 4


@pytest.mark.parametrize("lr", [-0.1, math.nan, math.inf])
def test_step_rejects_bad_learning_rate(lr):
    opt = make_optimizer(OptimConfig(), make_params())
    with pytest.raises(ValueError, match="learning rate"):
        opt.step(lr)


@pytest.mark.parametrize(
    "kwargs, field",
    [({"name": "lamb"}, "optim.name"), ({"momentum": 1.0}, "optim.momentum"),
     ({"betas": (0.9, 1.0)}, r"optim.betas\[1\]"), ({"weight_decay": -1e-5}, "optim.weight_decay"),
     ({"eps": 0.0}, "optim.eps"), ({"lars_eta": 0.0}, "optim.lars_eta")],
)
def test_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ValueError, match=field):
        OptimConfig(**kwargs)


def test_duplicate_parameter_names_are_rejected():
    a, b = Param("x", np.zeros(2)), Param("x", np.zeros(3))
    with pytest.raises(ValueError, match="appears twice"):
        make_optimizer(OptimConfig(), [a, b])


@pytest.mark.parametrize("name", ["sgd", "nesterov", "lars", "rmsprop"])
def test_float16_weights_follow_the_float64_update(name):
    cfg = OptimConfig(name=name, weight_decay=1e-2, eps=1e-3, lars_eta=0.02)
    half, full = make_params(dtype=np.float16), make_params(dtype=np.float64)
    opt_half, opt_full = make_optimizer(cfg, half), make_optimizer(cfg, full)
    for step, lr in enumerate(LRS):
        set_grads(half, step)
        set_grads(full, step)
        opt_half.step(lr)
        opt_full.step(lr)
    for h, f in zip(half, full):
        assert h.data.dtype == np.float16 and opt_half.state[h.name]["momentum"].dtype == np.float16
        np.testing.assert_allclose(h.data.astype(np.float64), f.data, rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------- the compiled momentum step
MOMENTUM_RULES = [dict(name="sgd", momentum=0.9, weight_decay=0.01), dict(name="nesterov", momentum=0.8),
                  dict(name="lars", momentum=0.9, weight_decay=5e-5), dict(name="lars", momentum=0.0, lars_epsilon=1e-3)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rule", MOMENTUM_RULES, ids=lambda r: r["name"])
def test_the_compiled_step_is_bitwise_the_per_parameter_one(rule, dtype):
    fused_params, plain_params = make_params(dtype=dtype), make_params(dtype=dtype)
    fused, plain = (make_optimizer(OptimConfig(**rule), ps) for ps in (fused_params, plain_params))
    assert fused._fused is not None
    plain._fused = None  # the numpy expressions, one parameter at a time
    for step, lr in enumerate(LRS):
        set_grads(fused_params, step)
        set_grads(plain_params, step)
        fused.step(lr)
        plain.step(lr)
        for a, b in zip(fused_params, plain_params):
            assert a.data.tobytes() == b.data.tobytes(), (a.name, step)
            assert fused.state[a.name]["momentum"].tobytes() == plain.state[b.name]["momentum"].tobytes()
    assert fused.num_updates == plain.num_updates == len(LRS)


def test_the_compiled_step_follows_a_parameter_whose_arrays_were_replaced():
    params = make_params(dtype=np.float32)
    opt = make_optimizer(OptimConfig(name="lars", momentum=0.9), params)
    params[0].data = params[0].data.copy()  # a new array: the old typed list would update a stale one
    set_grads(params, 0)
    before = params[0].data.copy()
    opt.step(0.5)
    assert not np.array_equal(params[0].data, before)
    with pytest.raises(ValueError, match="learning rate nan is not a finite number"):
        opt.step(float("nan"))


@pytest.mark.parametrize("sizes", [(7, 1000, 3, 64, 1), (5,), (300, 2, 2, 300), ()])
def test_the_lars_norms_are_bitwise_sum_squares_whatever_the_pairing(sizes):
    """norms_into runs two parameters' chains side by side; each sum stays sum_squares' own."""
    from numba import typed

    from models.optim import _kernels

    rng = np.random.default_rng(len(sizes))
    ws = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    gs = [rng.standard_normal(n).astype(np.float32) * 1e-3 for n in sizes]
    wanted = np.array([i % 3 != 1 for i in range(len(sizes))], bool)  # skip some: pairs form across gaps
    out = np.full((len(sizes), 2), -1.0)
    if sizes:
        _kernels.norms_into(typed.List(ws), typed.List(gs), wanted, out)
    for i in range(len(sizes)):
        want = (_kernels.sum_squares(ws[i]), _kernels.sum_squares(gs[i])) if wanted[i] else (-1.0, -1.0)
        assert tuple(out[i]) == want, i
