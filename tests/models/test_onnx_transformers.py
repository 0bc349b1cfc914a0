"""torchvision's ViT and Swin, in small (``torch_tiny_transformers``), train from ONNX: the graph model follows the
batch wherever attention moves it (``batch_axes``: torch's ``MultiheadAttention`` works sequence first, Swin folds
its windows into the batch), at the export's micro-batch and at others, and the parameters the graph broadcasts
(ViT's class token, ``Expand``) or gathers (Swin's relative position bias table) train and are written back.
One float64 step's logits and every parameter gradient equal torch's within 1e-10."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from models.onnx import OnnxFile, load_graph
from models.onnx.batch_axes import BatchAxis, NotFollowed, reshaped
from models.onnx.ir import OnnxImportError
from models.onnx.network import graph_model
from models.onnx.ops_tensor import Expand
from tests.models.gradcheck import check_layer
from tests.models.onnx_exports import training_export
from tests.models.onnx_parity import OpLayer, assert_step_equals_torch, graph_ops

torch = pytest.importorskip("torch")
nn = torch.nn

from tests.models.torch_tiny_transformers import TinySwin, TinyViT  # noqa: E402  (needs torch)

VIT = (lambda: TinyViT(dim=32, heads=2), (2, 3, 8, 8))  # head dim 16: sqrt(1 / sqrt(16)) is exact in float32 too
SWIN = (TinySwin, (2, 3, 16, 16))


@pytest.mark.parametrize("make,shape", [VIT, SWIN], ids=["vit", "swin"])
@pytest.mark.parametrize("batch,read_at", [(None, None), (3, None), (1, 3)], ids=["export", "other", "dynamic"])
def test_tiny_transformers_train_as_torchs_in_float64(make, shape, batch, read_at):
    """At the export's batch; at another batch than the (fixed) export's; a dynamic export read at 3, run at 1."""
    torch.manual_seed(0)
    model = assert_step_equals_torch(make(), shape, opset=20, batch=batch, read_at=read_at)
    names = {s.initializer for s in model.sites}
    assert "class_token" in names or "stage1.1.relative_position_bias_table" in names
    assert {"Expand", "Source"} & {type(op).__name__ for op in graph_ops(model)}


@pytest.mark.parametrize("make,shape", [VIT, SWIN], ids=["vit", "swin"])
def test_tiny_transformers_train_a_few_updates_and_write_their_parameters_back(make, shape, tmp_path):
    from models.loss import softmax_cross_entropy
    from models.onnx.check import check_file
    from models.onnx.export import trained_onnx

    torch.manual_seed(0)
    net = make()
    path = tmp_path / "net.onnx"
    path.write_bytes(training_export(net, torch.randn(*shape), opset=20))
    report = check_file(OnnxFile(str(path), "net.onnx"), shape[2])
    assert report.predict.clean and report.train.clean, report.train.lines
    model = graph_model(load_graph(str(path), batch_size=4))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, shape[2], shape[3], 3)).astype(np.float32)
    labels = rng.integers(0, 5, 4)
    losses = []
    for _ in range(4):
        loss, dlogits = softmax_cross_entropy(model.forward(x, training=True), labels)
        model.backward(dlogits, need_dx=False)
        losses.append(float(loss))
        for p in model.params():
            p.data -= 0.05 * p.grad
    assert losses[-1] < losses[0]
    written = {t.name: onnx.numpy_helper.to_array(t) for t in trained_onnx(model, OnnxFile(str(path), "net.onnx"))
               .graph.initializer}
    state = net.state_dict()
    for site in model.sites:
        assert written[site.initializer].shape == tuple(state[site.initializer].shape), site.initializer
        np.testing.assert_array_equal(written[site.initializer], site.to_onnx(site.param.data).reshape(
            written[site.initializer].shape))
    token = "class_token" if "class_token" in state else "stage1.0.relative_position_bias_table"
    assert not np.array_equal(written[token], state[token].numpy()), f"{token} trained"


@pytest.mark.parametrize("x,y,batch,b,want", [
    ((5, 2, 24), (5, 2, 3, 8), 2, BatchAxis(1), BatchAxis(1)),  # MultiheadAttention's packed q, k, v
    ((5, 2, 8), (5, 4, 4), 2, BatchAxis(1), BatchAxis(1, 1, 2)),  # heads folded into the batch
    ((4, 5, 4), (2, 2, 5, 4), 2, BatchAxis(0, 1, 2), BatchAxis(0)),  # and out again
    ((5, 2, 2, 4), (10, 8), 2, BatchAxis(1), BatchAxis(0, 5, 1)),  # tokens folded over the batch
    ((2, 4, 4, 2, 2, 8), (32, 4, 8), 2, BatchAxis(0), BatchAxis(0, 1, 16)),  # Swin's windows
])
def test_a_reshape_keeps_the_batch_where_the_traced_shapes_put_it(x, y, batch, b, want):
    assert reshaped(x, y, b, batch) == want


def test_a_reshape_that_splits_the_batch_or_is_ambiguous_at_batch_1_is_refused():
    with pytest.raises(NotFollowed, match="splits the batch"):
        reshaped((4, 3), (2, 6), BatchAxis(0), 4)
    with pytest.raises(NotFollowed, match="batch of 2 or more"):
        reshaped((5, 1, 8), (5, 8), BatchAxis(1), 1)


class BatchSoftmax(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 2, stride=2), nn.Linear(4, 2)

    def forward(self, x):
        t = self.conv(x).flatten(2).permute(2, 0, 1)  # [tokens, N, C]
        return self.fc(torch.softmax(t, dim=1).mean(0))


def test_a_softmax_over_the_batch_is_one_clear_blocker():
    torch.manual_seed(0)
    graph = load_graph(onnx.load_from_string(training_export(BatchSoftmax(), torch.randn(2, 3, 4, 4))), batch_size=2)
    with pytest.raises(OnnxImportError, match=r"Softmax at node .*the batch cannot be followed: it mixes the "
                                              r"batch's axis 1") as e:
        graph_model(graph)
    assert len(e.value.blockers) == 1


@pytest.mark.parametrize("src,dst,shape,repeats,x_shape", [
    (None, BatchAxis(0), (3, 1, 4), None, (1, 1, 4)),  # a class token broadcast to the batch
    (BatchAxis(1), BatchAxis(2), (2, 5, 3, 4), None, (5, 3, 1)),  # a batched input, broadcast elsewhere
    (None, BatchAxis(0), (3, 2, 4), (3, 2, 1), (1, 1, 4)),  # Tile
])
def test_expand_and_tile_match_finite_differences(src, dst, shape, repeats, x_shape):
    op = Expand("e", ["x"], "y", shape, src, dst, repeats)
    op.batch = 3
    check_layer(OpLayer(op), np.random.default_rng(0).standard_normal(x_shape), samples=20, rtol=1e-6)
