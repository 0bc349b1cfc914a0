"""One rule for what a pipeline split may name, the same for ``poprun-ipu predict --onnx --pipeline-splits``
(``models.onnx.open_for_prediction``) and training's ``ipu.pipeline_splits`` (``network.graph_model``): prefix
blocks, nodes and torch module paths of any depth start blocks in both; a split inside a residual block is
refused by both with the same message, which names the nearest cuts (``models.onnx.blocks``)."""

from __future__ import annotations

import re

import pytest

from models.onnx import OnnxFile, OnnxImportError, open_for_prediction
from models.onnx.blocks import module_path
from models.onnx.network import graph_model
from tests.models.onnx_exports import training_export

torch = pytest.importorskip("torch")
nn = torch.nn
SHOWN = "--onnx net.onnx"


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2 = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU())

    def forward(self, x):
        return x + self.conv2(torch.relu(self.bn(self.conv1(x))))


class Plain(nn.Module):
    """torchvision's MBConv layout without the residual: ``block`` is a Sequential of Sequentials."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)),
                                   nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU()))

    def forward(self, x):
        return self.block(x)


class Net(nn.Module):
    """``/layer3/layer3.0/conv2/conv2.0/Conv`` (attribute scopes) and
    ``/features/features.1/features.1.0/block/block.0/block.0.0/Conv`` (full-path scopes), as torch exports
    ResNet and EfficientNet."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer3 = nn.Sequential(Residual(4), Residual(4))
        self.features = nn.Sequential(nn.Sequential(Residual(4)), nn.Sequential(Plain(4), Plain(4)))
        self.fc = nn.Linear(4, 5)

    def forward(self, x):
        return self.fc(self.features(self.layer3(self.stem(x))).mean((2, 3)))


@pytest.fixture(scope="module")
def net_file(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("splits") / "net.onnx"
    path.write_bytes(training_export(Net(), torch.randn(2, 3, 8, 8)))
    return OnnxFile(str(path), SHOWN)


def predict_blocks(file, splits):
    profiles, _, _ = open_for_prediction(file, 2, (), None, splits)
    return list(dict.fromkeys(r.block for r in profiles.rows(2, 8)))


def train_blocks(file, splits):
    return graph_model(file.graph(None, 2), splits=splits, shown=SHOWN).blocks()


def test_module_paths_of_any_depth():
    assert module_path("/layer3/layer3.0/conv2/conv2.0/Conv") == "layer3.0.conv2.0"
    assert module_path("/features/features.4/features.4.0/block/block.0/block.0.0/Conv") == "features.4.0.block.0.0"
    assert module_path("/layer3/layer3.0/Relu") == "layer3.0" and module_path("/ReduceMean") == ""


@pytest.mark.parametrize("splits, blocks", [
    (("layer3",), None),  # a prefix block: the blocks stay the prefix blocks
    (("layer3.1",), ["input", "layer3.1"]),
    (("features.0.0", "features.1.0.block"), ["input", "features.0.0", "features.1.0.block"]),
    (("features.1.1.block.0.0", "fc"), ["input", "features.1.1.block.0.0", "fc"]),
    (("/features/features.1/features.1.0/block/block.1/block.1.0/Conv",),
     ["input", "/features/features.1/features.1.0/block/block.1/block.1.0/Conv"]),
])
def test_a_split_that_is_a_cut_starts_the_same_block_to_predict_and_to_train(net_file, splits, blocks):
    predicted, trained = predict_blocks(net_file, splits), train_blocks(net_file, splits)
    if blocks is None:
        assert splits[0] in predicted and splits[0] in trained
    else:
        assert predicted[:len(blocks)] == blocks and trained == blocks


@pytest.mark.parametrize("split, nearest", [
    ("layer3.0.conv2", "'layer3' (before) and 'layer3.1' (after)"),
    ("layer3.1.bn", "'layer3.1' (before) and 'features' (after)"),
    ("features.0.0.conv2.0", "'features' (before) and 'features.1' (after)"),
])
def test_a_split_inside_a_residual_block_is_refused_by_both_with_the_same_message(net_file, split, nearest):
    with pytest.raises(OnnxImportError) as predicted:
        open_for_prediction(net_file, 2, (), None, (split,))
    with pytest.raises(OnnxImportError) as trained:
        graph_model(net_file.graph(None, 2), splits=(split,), shown=SHOWN)
    p, t = str(predicted.value), str(trained.value)
    assert p.startswith(f"--pipeline-splits {split}: pipeline split {split!r} (node ") and t.startswith("ipu.pipeline_splits")
    assert p.replace("--pipeline-splits", "ipu.pipeline_splits") == t
    assert f"is not a cut of {SHOWN}: 2 tensors cross it" in p and f"the nearest cuts are {nearest}" in p
    assert "\n" not in p


@pytest.mark.parametrize("splits, words", [
    (("nope",), "'nope' names no block, node or module path of --onnx net.onnx"),
    (("stem",), "'stem' starts at the first layer"),
    (("layer3.1", "layer3"), "give the splits in graph order, once each"),
])
def test_other_bad_splits_are_refused_by_both_alike(net_file, splits, words):
    messages = []
    for run in (lambda: open_for_prediction(net_file, 2, (), None, splits),
                lambda: graph_model(net_file.graph(None, 2), splits=splits, shown=SHOWN)):
        with pytest.raises(OnnxImportError) as e:
            run()
        messages.append(re.sub(r"^(--pipeline-splits|ipu\.pipeline_splits) ", "", str(e.value)))
    assert messages[0] == messages[1] and words in messages[0]
