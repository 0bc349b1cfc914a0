"""One training step of a torch network's ONNX export against torch itself, in float64: the graph model's logits,
input gradient and every parameter's gradient (named as torch names them) within 1e-10 relative of torch's."""

from __future__ import annotations

import numpy as np
import onnx

from models.onnx import load_graph
from models.onnx.network import graph_model
from tests.models.onnx_exports import training_export


class OpLayer:
    """A one-input graph op as a layer for ``gradcheck.check_layer``."""

    def __init__(self, op) -> None:
        self.op = op

    def forward(self, x, training):
        return self.op.forward([x], training)

    def backward(self, dy):
        return self.op.backward(dy)[0]

    def params(self):
        return self.op.params()


class Operands:
    """A graph op of several computed inputs as a one-input layer for ``gradcheck.check_layer``: the input is every
    operand (engine layout) flattened one after another, in ``shapes``."""

    def __init__(self, op, *shapes) -> None:
        self.op, self.shapes = op, shapes

    def forward(self, x, training):
        parts, at = [], 0
        for s in self.shapes:
            n = int(np.prod(s))
            parts.append(x[at:at + n].reshape(s))
            at += n
        return self.op.forward(parts, training)

    def backward(self, dy):
        return np.concatenate([g.reshape(-1) for g in self.op.backward(dy)])

    def params(self):
        return self.op.params()


def graph_ops(model) -> list:
    """The graph model's ops, in order."""
    return [op for block in model._blocks for op in block.ops]


def nhwc_shape(shape: tuple) -> tuple:
    """An ONNX shape in the engine's layout (rank 4: NHWC)."""
    return tuple(shape[i] for i in (0, 2, 3, 1)) if len(shape) == 4 else tuple(shape)


def to_nhwc(a: np.ndarray) -> np.ndarray:
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def assert_step_equals_torch(net, shape, opset: int = 17, seed: int = 3, rtol: float = 1e-10, atol: float = 1e-14,
                             batch: int | None = None, read_at: int | None = None):
    """Export ``net`` (float32, training mode) for inputs of ``shape`` (NCHW), import it, run one float64 forward and
    backward on random data and compare with torch's (``net`` is made float64); returns the graph model. ``batch``:
    the step's batch (default the export's); ``read_at``: export the batch dynamic and read the graph at this
    batch (default: the export's batch, fixed)."""
    import torch

    dynamic = {"dynamic": {0: "batch"}, "output_name": "logits"} if read_at else {}
    graph = load_graph(onnx.load_from_string(training_export(net, torch.randn(*shape), opset=opset, **dynamic)),
                       batch_size=read_at or shape[0])
    model = graph_model(graph, np.float64)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch or shape[0],) + tuple(shape[1:]))
    logits = model.forward(to_nhwc(x).copy(), training=True)
    dlogits = rng.standard_normal(logits.shape)
    dx = model.backward(dlogits)
    net = net.double().train()
    xt = torch.from_numpy(x.copy()).requires_grad_()
    ref = net(xt)
    ref.backward(torch.from_numpy(dlogits))
    np.testing.assert_allclose(logits, ref.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(dx, to_nhwc(xt.grad.numpy()), rtol=rtol, atol=atol)
    grads = {k: p.grad.numpy() for k, p in net.named_parameters()}
    assert sorted(s.initializer for s in model.sites) == sorted(grads), "every parameter is torch's, by name"
    for site in model.sites:
        want = grads[site.initializer]
        np.testing.assert_allclose(site.to_onnx(site.param.grad).reshape(want.shape), want, rtol=rtol, atol=atol,
                                   err_msg=site.initializer)
    return model
