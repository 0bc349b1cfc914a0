"""models/onnx: ONNX graphs (written with onnx.helper here, nothing downloaded) -> nodes -> LayerProfile rows.

Expected counts are written out by hand: a multiply-add is 2 FLOPs forward and 4 backward (matrix
layers), norms 8/12 per element, activations 4/6, a residual add 1/1, pools k*k per output.
"""

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.onnx import OnnxImportError, ProfiledGraph, UnsupportedOpError, load_graph, onnx_profile

RNG = np.random.default_rng(0)


class Net:
    """A tiny graph writer: each method adds one node and returns its output's name."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def init(self, name, shape=None, value=None, dtype=np.float32):
        """A random float initializer of ``shape``, or the given ``value``."""
        v = RNG.standard_normal(shape).astype(dtype) if value is None else np.asarray(value, dtype)
        self.inits.append(numpy_helper.from_array(v, name))
        return name

    def op(self, op, inputs, name, n_out=1, **attrs):
        outs = [f"{name}:{i}" if i else name for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0]

    def conv(self, x, name, cin, cout, k, stride=1, pad=None, groups=1, bias=False):
        w = self.init(f"{name}.weight", (cout, cin // groups, k, k))
        ins = [x, w] + ([self.init(f"{name}.bias", (cout,))] if bias else [])
        p = k // 2 if pad is None else pad
        return self.op("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride], pads=[p] * 4, group=groups)

    def bn(self, x, name, c):
        ins = [x, self.init(f"{name}.weight", (c,)), self.init(f"{name}.bias", (c,)),
               self.init(f"{name}.running_mean", (c,)), self.init(f"{name}.running_var", value=np.ones(c))]
        return self.op("BatchNormalization", ins, name, epsilon=1e-5)

    def model(self, x_shape, out, opset=17, out_shape=None):
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def flatten_chain(net, x, name):
    """torch's traced ``x.view(x.size(0), -1)``: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    s = net.op("Shape", [x], f"{name}/Shape")
    n = net.op("Gather", [s, net.init(f"{name}.i0", value=0, dtype=np.int64)], f"{name}/Gather", axis=0)
    n1 = net.op("Unsqueeze", [n, net.init(f"{name}.ax", value=[0], dtype=np.int64)], f"{name}/Unsqueeze")
    minus = net.op("Constant", [], f"{name}/Constant", value=numpy_helper.from_array(np.array([-1], np.int64)))
    shape = net.op("Concat", [n1, minus], f"{name}/Concat", axis=0)
    return net.op("Reshape", [x, shape], f"{name}/Reshape")


def resnet_style():
    """conv-BN-ReLU stem, max pool, one identity and one downsampling basic block, GAP, flatten chain, Gemm."""
    net = Net()
    y = net.op("Relu", [net.bn(net.conv("x", "stem.conv", 3, 8, 3), "stem.bn", 8)], "stem.relu")
    y = net.op("MaxPool", [y], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])  # 16x16
    h = net.op("Relu", [net.bn(net.conv(y, "layer1.conv1", 8, 8, 3), "layer1.bn1", 8)], "layer1.relu1")
    h = net.bn(net.conv(h, "layer1.conv2", 8, 8, 3), "layer1.bn2", 8)
    y = net.op("Relu", [net.op("Add", [h, y], "layer1.add")], "layer1.relu2")
    h = net.op("Relu", [net.bn(net.conv(y, "layer2.conv1", 8, 16, 3, 2), "layer2.bn1", 16)], "layer2.relu1")  # 8x8
    h = net.bn(net.conv(h, "layer2.conv2", 16, 16, 3), "layer2.bn2", 16)
    s = net.bn(net.conv(y, "layer2.down", 8, 16, 1, 2, 0), "layer2.down_bn", 16)
    y = net.op("Relu", [net.op("Add", [h, s], "layer2.add")], "layer2.relu2")
    y = flatten_chain(net, net.op("GlobalAveragePool", [y], "head.pool"), "head.flatten")
    y = net.op("Gemm", [y, net.init("fc.weight", (10, 16)), net.init("fc.bias", (10,))], "fc.gemm", transB=1)
    return net.model(["batch", 3, 32, 32], y, out_shape=["batch", 10])


def mobilenet_style(opset=13):
    """Stem conv-BN-ReLU6 (Clip), one inverted residual (expand 6, depthwise groups=C, project), GAP, Gemm."""
    net = Net()
    lo, hi = net.init("zero", value=0.0), net.init("six", value=6.0)
    y = net.op("Clip", [net.bn(net.conv("x", "stem.conv", 3, 16, 3, 2), "stem.bn", 16), lo, hi], "stem.relu6")  # 8x8
    h = net.op("Clip", [net.bn(net.conv(y, "block1.expand", 16, 96, 1), "block1.bn0", 96), lo, hi], "block1.relu0")
    h = net.op("Clip", [net.bn(net.conv(h, "block1.dw", 96, 96, 3, groups=96), "block1.bn1", 96), lo, hi],
               "block1.relu1")
    h = net.bn(net.conv(h, "block1.project", 96, 16, 1), "block1.bn2", 16)
    y = net.op("Add", [y, h], "block1.add")
    y = net.op("Flatten", [net.op("GlobalAveragePool", [y], "head.pool")], "head.flatten", axis=1)
    y = net.op("Gemm", [y, net.init("fc.weight", (16, 10)), net.init("fc.bias", (10,))], "fc.gemm")
    return net.model([1, 3, 16, 16], y, opset=opset, out_shape=[1, 10])


def _sizes(model, skip=("running_mean", "running_var")):
    return sum(math.prod(t.dims) for t in model.graph.initializer
               if t.data_type == TensorProto.FLOAT and t.dims and not t.name.endswith(skip))


def test_resnet_style_profile_exact_counts():
    model = resnet_style()
    rows = onnx_profile(model, batch_size=2)
    by = {r.name: r for r in rows}
    assert sum(r.params for r in rows) == _sizes(model) == 8 * 3 * 9 + 2 * (8 * 8 * 9) + 8 * 16 * 9 + 16 * 16 * 9 \
        + 8 * 16 + 2 * (8 + 8 + 8 + 16 + 16 + 16) + 160 + 10
    # Convolutions: 2 images x out pixels x out channels x k*k x in channels (multiply-adds)
    macs = {"stem.conv": 2 * 32 * 32 * 8 * 9 * 3, "layer1.conv1": 2 * 16 * 16 * 8 * 9 * 8,
            "layer1.conv2": 2 * 16 * 16 * 8 * 9 * 8, "layer2.conv1": 2 * 8 * 8 * 16 * 9 * 8,
            "layer2.conv2": 2 * 8 * 8 * 16 * 9 * 16, "layer2.down": 2 * 8 * 8 * 16 * 8, "fc.gemm": 2 * 16 * 10}
    assert macs == {"stem.conv": 442368, "layer1.conv1": 294912, "layer1.conv2": 294912, "layer2.conv1": 147456,
                    "layer2.conv2": 294912, "layer2.down": 16384, "fc.gemm": 320}
    for name, m in macs.items():
        assert (by[name].flops_fwd, by[name].flops_bwd) == (2 * m, 4 * m), name
    assert by["layer2.conv1"].conv.out_size == (8, 8) and by["layer2.conv1"].conv.stride == 2
    assert by["layer2.conv1"].in_shape == (2, 16, 16, 8)  # NHWC, as the built-in models
    assert by["stem.pool"].kind == "pool" and by["stem.pool"].flops_fwd == 9 * 2 * 8 * 16 * 16
    assert by["head.pool"].flops_fwd == 2 * 16 * 8 * 8 and by["head.pool"].activation_elems == 32
    assert by["layer1.add"].kind == "add" and by["layer1.add"].flops_fwd == 2 * 8 * 16 * 16
    assert (by["layer1.relu2"].flops_fwd, by["layer1.relu2"].saved_elems) == (2 * 8 * 16 * 16, 0) and by["stem.bn"].flops_fwd == 8 * 2 * 8 * 32 * 32
    assert rows[-1].kind == "loss" and rows[-1].flops_fwd == 6 * 20
    e = {"stem": 2 * 8 * 32 * 32, "l1": 2 * 8 * 16 * 16, "l2": 2 * 16 * 8 * 8}
    conv_flops = 2 * sum(macs.values())
    pool = 9 * e["l1"] + 2 * 16 * 8 * 8
    adds = e["l1"] + e["l2"]
    expected = conv_flops + pool + 2 * adds + 120 \
        + 8 * (e["stem"] + 2 * e["l1"] + 3 * e["l2"]) + 4 * (e["stem"] + e["l1"] + e["l2"])  # ReLU after add: 1
    assert sum(r.flops_fwd for r in rows) == expected == 3369720
    assert [r.block for r in rows if r.kind != "loss"][:4] == ["stem"] * 4
    assert ProfiledGraph(load_graph(model, batch_size=2)).blocks() == ["stem", "layer1", "layer2", "head", "fc"]


def test_rows_scale_with_the_batch():
    net = ProfiledGraph(load_graph(resnet_style(), batch_size=1))
    one, four = net.profile(1), net.profile(4)
    assert [4 * r.flops_fwd for r in one] == [r.flops_fwd for r in four]
    assert [r.params for r in one] == [r.params for r in four]
    assert four[0].conv.batch == 4 and four[0].in_shape == (4, 32, 32, 3)


def test_mobilenet_style_depthwise_relu6_inverted_residual():
    model = mobilenet_style()
    rows = onnx_profile(model, batch_size=1)
    by = {r.name: r for r in rows}
    # the scalar Clip bounds are constants, not parameters (nor counted by _sizes)
    assert sum(r.params for r in rows) == _sizes(model) == 16 * 27 + 96 * 16 + 96 * 9 + 16 * 96 \
        + 2 * (16 + 96 + 96 + 16) + 160 + 10
    assert by["block1.dw"].kind == "dwconv" and by["block1.dw"].conv.groups == 96
    assert by["block1.dw"].flops_fwd == 2 * 8 * 8 * 96 * 9 == 110592
    assert by["block1.expand"].flops_fwd == 2 * 8 * 8 * 96 * 16 == 196608
    assert by["stem.conv"].flops_fwd == 2 * 8 * 8 * 16 * 27 == 55296
    assert by["block1.relu1"].kind == "act" and by["block1.add"].kind == "add"
    graph = load_graph(model)
    clip = next(n for n in graph.nodes if n.name == "block1.relu0")
    assert clip.attrs["min"] == 0.0 and clip.attrs["max"] == 6.0 and clip.inputs == ("block1.bn0",)
    total = 55296 + 196608 + 110592 + 196608 + 320 + 8 * 64 * (16 + 96 + 96 + 16) + 4 * 64 * (16 + 96 + 96) \
        + 16 * 64 + 16 * 64 + 6 * 10
    assert sum(r.flops_fwd for r in rows) == total == 729468


def test_silu_pattern_is_one_activation():
    net = Net()
    c = net.conv("x", "stem.conv", 3, 8, 3)
    y = net.op("Mul", [c, net.op("Sigmoid", [c], "stem.sig")], "stem.silu")
    y = net.op("Flatten", [net.op("GlobalAveragePool", [y], "head.pool")], "head.flat")
    y = net.op("Gemm", [y, net.init("fc.weight", (8, 4))], "fc")
    graph = load_graph(net.model([1, 3, 8, 8], y, out_shape=[1, 4]))
    assert [n.op for n in graph.nodes] == ["Conv", "SiLU", "GlobalAveragePool", "Flatten", "Gemm"]
    silu = graph.nodes[1]
    assert silu.inputs == ("stem.conv",) and silu.outputs == ("stem.silu",)
    row = next(r for r in ProfiledGraph(graph).profile(1) if r.name == "stem.silu")
    assert (row.kind, row.flops_fwd, row.saved_elems) == ("act", 4 * 512, 512)


def test_shape_chain_is_folded():
    graph = load_graph(resnet_style(), batch_size=3)
    ops = [n.op for n in graph.nodes]
    assert "Shape" not in ops and "Gather" not in ops and "Constant" not in ops and "Concat" not in ops
    reshape = next(n for n in graph.nodes if n.op == "Reshape")
    assert reshape.attrs["shape"] == [3, -1] and reshape.output_shapes == ((3, 16),)
    assert graph.input_shape == (3, 3, 32, 32) and graph.output_shapes == ((3, 10),)


def test_unsupported_op_names_op_node_and_inputs():
    net = Net()
    y = net.op("Flatten", ["x"], "flat")
    y = net.op("LSTM", [y, net.init("W", (1, 16, 768)), net.init("R", (1, 16, 4))], "rnn.lstm", hidden_size=4)
    with pytest.raises(UnsupportedOpError) as e:
        load_graph(net.model([1, 3, 16, 16], y, out_shape=[1, 4]))
    msg = str(e.value)
    assert "LSTM" in msg and "'rnn.lstm'" in msg and "['flat', 'W', 'R']" in msg and "Conv" in msg
    assert "\n" not in msg and isinstance(e.value, ValueError)


def test_truncated_file_and_missing_file(tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(resnet_style(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(OnnxImportError, match=r"net\.onnx: not a readable ONNX model") as e:
        load_graph(path, batch_size=1)
    assert "\n" not in str(e.value)
    with pytest.raises(OnnxImportError, match=r"nothing\.onnx: cannot read the file"):
        load_graph(tmp_path / "nothing.onnx")


def test_not_an_image_batch_and_unfixed_dims():
    net = Net()
    y = net.op("Gemm", ["x", net.init("w", (10, 4))], "fc")
    with pytest.raises(OnnxImportError, match=r"graph input 'x' of shape \[1, 10\] is not an image batch") as e:
        load_graph(net.model([1, 10], y, out_shape=[1, 4]))
    assert "\n" not in str(e.value)
    with pytest.raises(OnnxImportError, match=r"dimension 0 \('batch'\) is dynamic; give the batch size"):
        load_graph(resnet_style())
    model = mobilenet_style()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    with pytest.raises(OnnxImportError, match=r"dimension 2 \('h'\) is dynamic; give the height \(image_size\)"):
        load_graph(model)
    assert load_graph(model, image_size=32).nodes[0].output_shapes == ((1, 16, 16, 16),)


def test_opset_newer_than_onnx_knows():
    model = mobilenet_style()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(OnnxImportError, match=r"opset \d+ is newer than the installed onnx"):
        load_graph(model)


def test_clip_bounds_as_attributes_at_an_old_opset():
    """Opset 6 passes Clip's bounds as attributes, opset 13 as inputs: the nodes read the same."""
    net = Net()
    y = net.op("Clip", [net.conv("x", "c", 3, 4, 3)], "relu6", min=0.0, max=6.0)
    y = net.op("Flatten", [net.op("GlobalAveragePool", [y], "gap")], "flat")
    y = net.op("Gemm", [y, net.init("w", (4, 2)), net.init("b", (2,))], "fc")  # C is optional from opset 11
    clip = load_graph(net.model([1, 3, 8, 8], y, opset=10, out_shape=[1, 2])).nodes[1]
    assert clip.attrs["min"] == 0.0 and clip.attrs["max"] == 6.0 and clip.inputs == ("c",)


def test_named_split_nodes_start_blocks():
    net = ProfiledGraph(load_graph(resnet_style(), batch_size=1), blocks=["stem.conv", "layer2.conv1", "fc.gemm"])
    assert net.blocks() == ["stem.conv", "layer2.conv1", "fc.gemm"]
    with pytest.raises(OnnxImportError, match="not nodes of the graph"):
        ProfiledGraph(load_graph(resnet_style(), batch_size=1), blocks=["nope"])


@pytest.mark.torch
def test_legacy_torch_export_of_the_builtin_resnet_matches_its_profile():
    """torch's TorchScript exporter (``dynamo=False``; the dynamo exporter is tested in tests/launch/predict/test_onnx.py) of
    the torchvision-layout ResNet-18 oracle, BN kept (training mode): the same rows, parameters, FLOPs and
    activations as the built-in model (row order differs only where torch runs the shortcut first)."""
    import torch

    from models import build_model
    from tests.models.onnx_exports import training_export
    from tests.models.torch_resnet_ref import ResNetRef

    ref = ResNetRef("resnet18", num_classes=10, width=8)
    graph = training_export(ref, torch.randn(2, 3, 32, 32), input_name="x", dynamic={0: "batch"})
    net = ProfiledGraph(load_graph(onnx.load_from_string(graph), batch_size=4))
    rows, builtin = net.profile(4), build_model("resnet18", 10, width=8, resolution=32).profile(4)
    assert net.blocks() == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "fc"]
    assert sorted(r.kind for r in rows) == sorted(r.kind for r in builtin)
    for key in ("params", "flops_fwd", "flops_bwd", "activation_elems"):
        assert sum(getattr(r, key) for r in rows) == sum(getattr(r, key) for r in builtin), key
    assert sum(r.params for r in rows) == sum(p.numel() for p in ref.parameters()) == 177362
