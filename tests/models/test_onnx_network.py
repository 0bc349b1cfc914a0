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


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class TinyMobileNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()),
            InvertedResidual(8, 8, 1, 2), InvertedResidual(8, 12, 2, 3), InvertedResidual(12, 12, 1, 2))
        self.classifier = nn.Linear(12, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c, s):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, s, 1), nn.Conv2d(s, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(nn.functional.adaptive_avg_pool2d(x, 1)))))


class TinyEfficientNetG16(nn.Module):
    """A B0-style stem and one MBConv block with a G16 grouped 3x3 conv, group norm, SiLU, SE, residual."""

    def __init__(self, classes=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.GroupNorm(4, 32), nn.SiLU())
        self.expand = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.GroupNorm(4, 64), nn.SiLU())
        self.grouped = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=4, bias=False), nn.GroupNorm(4, 64), nn.SiLU())
        self.se = SqueezeExcite(64, 8)
        self.project = nn.Sequential(nn.Conv2d(64, 32, 1, bias=False), nn.GroupNorm(4, 32))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.se(self.grouped(self.expand(x))))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


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
