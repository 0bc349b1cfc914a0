"""Tiny ConvNeXt- and ResNet-D-like networks exported from torch train through ``graph_model`` as torch trains them:
one step's logits and every gradient equal torch's in float64 (within 1e-10), and three SGD updates on a
cross-entropy loss keep the logits and weights equal to torch's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models.onnx import load_graph
from models.onnx.network import graph_model
from tests.models.onnx_exports import training_export
from tests.models.onnx_parity import assert_step_equals_torch, graph_ops, to_nhwc

torch = pytest.importorskip("torch")
nn = torch.nn


class LayerNorm2d(nn.LayerNorm):
    """torchvision's ConvNeXt norm: channels-last layer norm of an NCHW tensor."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, channels-last layer norm, Linear, GELU, Linear, layer scale, residual (torchvision's CNBlock)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.pw2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 0.5))

    def forward(self, x):
        y = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        y = self.pw2(nn.functional.gelu(self.pw1(y))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class TinyConvNeXt(nn.Module):
    def __init__(self, dim: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 2, 2), LayerNorm2d(dim, eps=1e-6))
        self.block = ConvNeXtBlock(dim)
        self.head_norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc = nn.Linear(dim, classes)

    def forward(self, x):
        return self.fc(self.head_norm(self.block(self.stem(x)).mean((2, 3))))


class ResNetDBlock(nn.Module):
    """A strided bottleneck-free residual block whose shortcut is ResNet-D's: 2x2/2 average pool (ceil mode, padding
    not counted, as timm's), then a 1x1 conv and batch norm."""

    def __init__(self, cin: int = 3, cout: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
                                  nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.fc = nn.Linear(cout, classes)

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.relu(y + self.down(x)).mean((2, 3)))


NETS = [(TinyConvNeXt, (2, 3, 8, 8), 20), (ResNetDBlock, (3, 3, 9, 9), 17)]


@pytest.mark.parametrize("net,shape,opset", NETS)
def test_one_step_equals_torchs_in_float64(net, shape, opset):
    torch.manual_seed(0)
    model = assert_step_equals_torch(net(), shape, opset=opset)
    if net is TinyConvNeXt:  # the stem's LayerNorm2d is one norm of the NHWC channels (the block's transposes stay:
        ops = graph_ops(model)  # its Linears and GELU run between them, in ONNX's layout)
        assert [type(op).__name__ for op in ops[:3]] == ["LayerOp", "LayerNorm", "LayerOp"]
        assert not ops[1].onnx_layout and ops[1].inputs == [ops[0].output]


@pytest.mark.parametrize("net,shape,opset", NETS)
def test_three_sgd_updates_equal_torchs_in_float64(net, shape, opset):
    torch.manual_seed(0)
    ref = net()
    graph = load_graph(onnx.load_from_string(training_export(ref, torch.randn(*shape), opset=opset)),
                       batch_size=shape[0])
    model = graph_model(graph, np.float64)
    ref = ref.double().train()
    params = dict(ref.named_parameters())
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal(shape)
        labels = rng.integers(0, 5, shape[0])
        logits = model.forward(to_nhwc(x).copy(), training=True)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(shape[0]), labels] -= 1
        model.backward(p / shape[0])
        for param in model.params():
            param.data -= 0.1 * param.grad
        opt.zero_grad()
        out = ref(torch.from_numpy(x))
        nn.functional.cross_entropy(out, torch.from_numpy(labels)).backward()
        opt.step()
        np.testing.assert_allclose(logits, out.detach().numpy(), rtol=1e-10, atol=1e-13)
    for site in model.sites:
        want = params[site.initializer].detach().numpy()
        np.testing.assert_allclose(site.to_onnx(site.param.data).reshape(want.shape), want, rtol=1e-10, atol=1e-13,
                                   err_msg=site.initializer)
