"""An imported network does the built-in model's arithmetic: the ONNX export of efficientnet-tiny (the default
job's network; depth 0.5 so that stochastic depth acts in three blocks) has the built-in's parameter names and
kinds, and gives its logits (eval, and training with the same generator: dropout and drop-connect masks) and
every gradient bitwise. LARS and weight decay skip the parameters the graph shows to be biases or norm
parameters, for an EfficientNet-style and a ResNet-style graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from models.onnx import UnsupportedOpError, load_graph
from models.onnx.network import graph_model
from models.onnx.ops import DropPath
from models.optim import OptimConfig, make_optimizer
from models.se import SqueezeExcitation
from tests.models.onnx_builtin import builtin_efficientnet, export_builtin
from tests.models.onnx_exports import training_export

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pair():
    builtin = builtin_efficientnet(depth=0.5)
    graph = graph_model(load_graph(onnx.load_from_string(export_builtin(builtin, depth=0.5)), batch_size=16))
    return builtin, graph


def _ops(model, cls):
    return [op for block in model._blocks for op in block.ops if isinstance(op, cls)
            or isinstance(getattr(op, "layer", None), cls)]


def test_the_efficientnet_export_computes_the_builtin_bitwise(pair):
    builtin, graph = pair
    assert [(p.name, p.kind, p.data.shape) for p in graph.params()] == \
        [(p.name, p.kind, p.data.shape) for p in builtin.params()]
    assert len(_ops(graph, SqueezeExcitation)) == 10  # the six-node SE of every block, as one layer
    assert [op.p for op in _ops(graph, DropPath)] == pytest.approx([0.04, 0.06, 0.08], abs=1e-12)
    x = np.random.default_rng(1).standard_normal((16, 28, 28, 1)).astype(np.float32)
    np.testing.assert_array_equal(graph.forward(x, training=False), builtin.forward(x, training=False))
    logits = {}
    for name, model in (("builtin", builtin), ("graph", graph)):
        model.set_rng(np.random.default_rng(5))
        logits[name] = model.forward(x, training=True)
    np.testing.assert_array_equal(logits["graph"], logits["builtin"])
    graph.set_rng(np.random.default_rng(6))  # other masks: other logits (the masks are drawn and used)
    assert not np.array_equal(graph.forward(x, training=True), logits["builtin"])
    dy = np.random.default_rng(2).standard_normal(logits["builtin"].shape).astype(np.float32)
    for name, model in (("builtin", builtin), ("graph", graph)):
        model.set_rng(np.random.default_rng(5))
        model.forward(x, training=True)
        model.backward(dy, need_dx=False)
    for p, q in zip(graph.params(), builtin.params()):
        np.testing.assert_array_equal(p.grad, q.grad, err_msg=p.name)


def _excluded(model) -> set[str]:
    return {p.name for p in model.params() if not p.decays}


def _torch_excluded(net) -> set[str]:
    """torch's names of the biases and the norm layers' parameters."""
    norms = (torch.nn.BatchNorm2d, torch.nn.GroupNorm)
    out = {n for n, _ in net.named_parameters() if n.endswith(".bias")}
    for prefix, module in net.named_modules():
        if isinstance(module, norms):
            out |= {f"{prefix}.{n}" for n, _ in module.named_parameters()}
    return out


def test_lars_skips_the_biases_and_norm_parameters_found_in_an_efficientnet_graph(pair):
    builtin, graph = pair
    assert _excluded(graph) == _excluded(builtin)
    assert {"features.0.1.weight", "features.0.1.bias", "features.1.0.block.1.fc1.bias",
            "classifier.1.bias"} <= _excluded(graph)  # a group norm (read through Unsqueeze), SE, classifier
    assert "features.1.0.block.1.fc1.weight" not in _excluded(graph)
    # one LARS step from the same weights and gradients: the same bits
    cfg = OptimConfig(name="lars", momentum=0.9, weight_decay=5e-5, lars_eta=0.001)
    rng = np.random.default_rng(3)
    for p, q in zip(graph.params(), builtin.params()):
        np.copyto(q.data, p.data)
        p.grad[...] = q.grad[...] = rng.standard_normal(p.grad.shape).astype(np.float32)
    for model in (graph, builtin):
        make_optimizer(cfg, model.params()).step(0.5)
    for p, q in zip(graph.params(), builtin.params()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=p.name)


def test_lars_skips_the_biases_and_norm_parameters_found_in_a_resnet_graph():
    from tests.models.torch_tiny_nets import TinyResNet

    torch.manual_seed(0)
    net = TinyResNet(5)
    model = graph_model(load_graph(onnx.load_from_string(training_export(net, torch.randn(2, 3, 32, 32))), batch_size=4))
    expected = _torch_excluded(net)
    assert "bn1.weight" in expected and "layer2.down.1.bias" in expected and "fc.bias" in expected
    assert _excluded(model) == expected
    assert {p.name for p in model.params() if p.decays} == {n for n, _ in net.named_parameters()} - expected
    # LARS (no weight decay, no momentum): a skipped parameter moves by lr x gradient, a weight by its trust ratio
    cfg = OptimConfig(name="lars", momentum=0.0, weight_decay=0.0, lars_eta=0.001)
    before = {p.name: p.data.copy() for p in model.params()}
    for p in model.params():
        p.grad[...] = 1.0
    make_optimizer(cfg, model.params()).step(0.1)
    for p in model.params():
        step = before[p.name] - p.data
        if p.decays:
            assert not np.allclose(step, 0.1), p.name
        else:
            np.testing.assert_allclose(step, 0.1, rtol=1e-6, err_msg=p.name)


def test_a_random_op_outside_torchs_stochastic_depth_is_unsupported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["r"], name="noise"),
             helper.make_node("Add", ["x", "r"], ["a"], name="add"),
             helper.make_node("Flatten", ["a"], ["y"], name="flat")]
    model = helper.make_model(helper.make_graph(nodes, "noisy", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="RandomUniformLike at node 'noise'.*stochastic depth"):
        load_graph(model)
