"""Gelu trains (``models.onnx.ops.Unary``): exact (erf) and approximate="tanh", with a float64 finite-difference
check of its backward and torch's values and gradients, for the op and for a tiny network exported at opset 20."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models.onnx import load_graph
from models.onnx.network import graph_model
from models.onnx.ops import Unary
from tests.models.onnx_exports import training_export
from tests.models.onnx_parity import OpLayer

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_finite_differences_in_float64(approximate):
    from tests.models.gradcheck import check_layer

    x = np.random.default_rng(0).standard_normal((3, 4, 5, 2)) * 3
    check_layer(OpLayer(Unary("g", "Gelu", ["x"], "y", {"approximate": approximate})), x, samples=40, rtol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_values_and_gradients_equal_torchs_in_float64(approximate):
    x = np.random.default_rng(1).standard_normal(2000) * 4
    g = np.random.default_rng(2).standard_normal(2000)
    op = Unary("g", "Gelu", ["x"], "y", {"approximate": approximate})
    y, dx = op.forward([x], True), op.backward(g)[0]
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = torch.nn.functional.gelu(xt, approximate=approximate)
    yt.backward(torch.from_numpy(g))
    # tanh's far left tail (1 + tanh(u) ~ 1e-9) cancels in torch's formula and ours alike: 1e-14 absolute there
    atol = 1e-14 if approximate == "tanh" else 1e-15
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=atol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=atol)


class GeluNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = torch.nn.functional.gelu(self.c1(x))
        x = torch.nn.functional.gelu(self.c2(x), approximate="tanh")
        return self.fc(x.mean((2, 3)))


def test_a_network_exported_at_opset_20_trains_gelu_as_torch_in_float64():
    """Both Gelu nodes import as Gelu (opset 20) and the graph model's logits, input gradient and every weight's
    gradient equal torch's in float64 within 1e-10 relative."""
    torch.manual_seed(0)
    net = GeluNet()
    graph = load_graph(onnx.load_from_string(training_export(net, torch.randn(2, 1, 8, 8), opset=20)), batch_size=2)
    assert [n.attrs.get("approximate", "none") for n in graph.nodes if n.op == "Gelu"] == ["none", "tanh"]
    model = graph_model(graph, np.float64)
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 1))
    dlogits = np.random.default_rng(4).standard_normal((2, 3))
    logits = model.forward(x, training=True)
    dx = model.backward(dlogits)
    net = net.double()
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
    ref = net(xt)
    ref.backward(torch.from_numpy(dlogits))
    np.testing.assert_allclose(logits, ref.detach().numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(dx, xt.grad.numpy().transpose(0, 2, 3, 1), rtol=1e-10, atol=1e-14)
    torch_grads = dict(net.named_parameters())
    for site in model.sites:
        want = torch_grads[site.initializer].grad.numpy()
        np.testing.assert_allclose(site.to_onnx(site.param.grad).reshape(want.shape), want, rtol=1e-10, atol=1e-14)
