"""The trainable graph model of an ONNX file against PyTorch, in float64: logits, loss and every parameter
gradient of networks exported from torch in training mode (ResNet-18-style, MobileNet-V2-style,
EfficientNet-B0-style with G16 groups and group norm), and a finite-difference check of the DAG executor."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from models.loss import softmax_cross_entropy
from models.onnx import load_graph
from models.onnx.network import graph_model
from tests.models.onnx_exports import training_export
from tests.models.torch_tiny_nets import TinyEfficientNetG16, TinyMobileNet, TinyResNet

torch = pytest.importorskip("torch")
nn = torch.nn
RTOL = 1e-10


def export(net, x) -> onnx.ModelProto:
    return onnx.load_from_string(training_export(net, x))


def torch_names(model: onnx.ModelProto, state: dict) -> dict[str, str]:
    """Graph initializer -> torch parameter, through the Unsqueeze/Identity nodes the importer folds."""
    out = {k: k for k in state}
    for node in model.graph.node:
        if node.op_type in ("Unsqueeze", "Identity") and node.input[0] in out:
            out[node.output[0]] = out[node.input[0]]
    return out


def rel(a, b, floor: float = 0.0) -> float:
    """max |a - b| over max |b|, or over ``floor`` when larger: a gradient that cancels to almost nothing
    (a norm's offset whose output a later batch norm centres: 1e-17; a scale before ReLU6: 1e-5) has
    float64 rounding of the terms it cancels, so it is measured against 1 % of the model's largest gradient."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), floor, 1e-300))


def compare(net, shape, classes, seed=0) -> dict[str, float]:
    """Export ``net`` (float64, training mode), train-step both; the largest relative errors."""
    torch.manual_seed(seed)
    net = net.double()
    x = torch.randn(*shape, dtype=torch.float64)
    labels = np.random.default_rng(seed).integers(0, classes, shape[0])
    model_proto = export(net, x)
    model = graph_model(load_graph(model_proto), np.float64)
    net.train()
    logits_t = net(x)
    loss_t = nn.functional.cross_entropy(logits_t, torch.from_numpy(labels))
    net.zero_grad()
    loss_t.backward()
    logits = model.forward(x.numpy().transpose(0, 2, 3, 1), training=True)
    loss, dlogits = softmax_cross_entropy(logits, labels)
    model.backward(dlogits, need_dx=False)
    errors = {"logits": rel(logits, logits_t.detach().numpy()), "loss": rel(loss, loss_t.item())}
    state = dict(net.named_parameters())
    names = torch_names(model_proto, state)
    assert sorted({names[p.name] for p in model.params()}) == sorted(state)
    floor = 0.01 * max(float(np.abs(t.grad.numpy()).max()) for t in state.values())
    for p in model.params():
        t = state[names[p.name]]
        site = next(s for s in model.sites if s.param is p)
        errors[names[p.name]] = rel(site.to_onnx(p.grad).reshape(t.shape), t.grad.numpy(), floor)
    return errors


@pytest.mark.parametrize("net,shape,classes", [
    (TinyResNet, (4, 3, 32, 32), 5),
    (TinyMobileNet, (4, 3, 16, 16), 4),
    (TinyEfficientNetG16, (2, 3, 16, 16), 3),
], ids=["resnet18-style", "mobilenetv2-style", "efficientnet-b0-g16-gn-style"])
def test_float64_logits_loss_and_gradients_match_torch(net, shape, classes):
    errors = compare(net(classes), shape, classes)
    worst = max(errors, key=errors.get)
    print(f"{net.__name__}: max relative error {errors[worst]:.2e} ({worst})")
    assert errors[worst] < RTOL, errors


def _twice_used_graph() -> onnx.ModelProto:
    """x -> Conv -> t; t is read by a Relu, a Sigmoid and a Mul (t * sigmoid(t) + relu(t)), then a flatten
    and a Gemm: the executor must sum three gradients into t."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)), "w"),
             numpy_helper.from_array(rng.standard_normal(4), "b"),
             numpy_helper.from_array(rng.standard_normal((3, 4 * 5 * 5)), "fc"),
             numpy_helper.from_array(rng.standard_normal((4, 1, 1)), "scale")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["t"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["t"], ["s"], name="sig"),
             helper.make_node("Mul", ["t", "s2"], ["m"], name="mul"),
             helper.make_node("Mul", ["s", "scale"], ["s2"], name="scale"),
             helper.make_node("Add", ["m", "r"], ["a"], name="add"),
             helper.make_node("Flatten", ["a"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1)]
    nodes = nodes[:3] + [nodes[4], nodes[3]] + nodes[5:]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE,
                                                                             [2, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_finite_differences_of_a_tensor_used_three_times():
    model = graph_model(load_graph(_twice_used_graph()), np.float64)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 5, 2))
    labels = np.array([0, 2])

    def loss_of(inp):
        return softmax_cross_entropy(model.forward(inp, training=True), labels)[0]

    _, dlogits = softmax_cross_entropy(model.forward(x, training=True), labels)
    dx = model.backward(dlogits).copy()
    grads = {p.name: p.grad.copy() for p in model.params()}
    h = 1e-6
    for target, analytic in [(x, dx)] + [(p.data, grads[p.name]) for p in model.params()]:
        flat, ana = target.reshape(-1), analytic.reshape(-1)
        for i in rng.choice(flat.size, min(flat.size, 12), replace=False):
            old = flat[i]
            flat[i] = old + h
            up = loss_of(x)
            flat[i] = old - h
            down = loss_of(x)
            flat[i] = old
            assert abs((up - down) / (2 * h) - ana[i]) < 1e-7 * max(1.0, abs(ana[i])), (i, ana[i])
