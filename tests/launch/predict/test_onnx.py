"""poprun-ipu predict|profile --onnx: torchvision-layout MobileNet-V2- and ResNet-18-style networks written
here, exported with torch (TorchScript exporter, training mode, no constant folding), from a temporary folder."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.models.onnx_exports import training_export

POPRUN_IPU = str(Path(sys.executable).with_name("poprun-ipu"))
pytestmark = pytest.mark.torch


def _mobilenet_v2():
    from torch import nn

    def cbr(cin, cout, k=1, s=1, g=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout), nn.ReLU6())

    class Inverted(nn.Module):
        def __init__(self, cin, cout, s, e=6):
            super().__init__()
            h = cin * e
            self.use_res = s == 1 and cin == cout
            self.conv = nn.Sequential(cbr(cin, h), cbr(h, h, 3, s, h), nn.Conv2d(h, cout, 1, bias=False),
                                      nn.BatchNorm2d(cout))

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(cbr(3, 16, 3, 2), Inverted(16, 16, 1, 1), Inverted(16, 24, 2),
                                          Inverted(24, 24, 1), Inverted(24, 32, 2), Inverted(32, 32, 1), cbr(32, 128))
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, 100))

        def forward(self, x):
            return self.classifier(nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    return Net()


def _export(model, path):
    import torch

    path.write_bytes(training_export(model, torch.randn(2, 3, 64, 64), input_name="x",
                                     dynamic={0: "batch", 2: "h", 3: "w"}))


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    from tests.models.torch_resnet_ref import ResNetRef

    d = tmp_path_factory.mktemp("nets")
    _export(_mobilenet_v2(), d / "mobilenet_v2.onnx")
    _export(ResNetRef("resnet18", num_classes=1000), d / "resnet18.onnx")
    return d


def _run(cwd, *args):
    return subprocess.run([POPRUN_IPU, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("net", ["mobilenet_v2", "resnet18"])
def test_predict_and_profile_on_pod16_and_pod64(nets, net):
    done = _run(nets, "predict", "--onnx", f"{net}.onnx", "--image-size", "224", "--system", "POD16,POD64", "--global-batch", "2560",
                "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    assert {r["system"] for r in rows} == {"POD16", "POD64"} and all(r["fits"] for r in rows)
    assert rows[0]["system"] == "POD64" and rows[0]["images_per_s"] > rows[1]["images_per_s"]
    assert all(r["model"] == f"onnx:{net}.onnx" and r["image_size"] == 224 for r in rows)
    for system in ("POD16", "POD64"):
        done = _run(nets, "profile", "--onnx", f"{net}.onnx", "--image-size", "224", "--system", system,
                    "--ipus-per-replica", "2", "--global-batch", "5120", "--pipeline-splits", "layer3" if net == "resnet18" else "features.4",
                    "--out", "img")
        assert done.returncode == 0, done.stderr
        assert (nets / "img" / f"profile_{net}_mk2.png").exists()


def test_bad_onnx_input_exits_2_with_one_line_and_writes_nothing(nets, tmp_path):
    (tmp_path / "broken.onnx").write_bytes((nets / "resnet18.onnx").read_bytes()[:5000])
    for args, words in ((["--onnx", "broken.onnx", "--image-size", "64"], "not a readable ONNX model"),
                        (["--onnx", "none.onnx"], "no such file"),
                        (["--onnx", str(nets / "resnet18.onnx")], "dynamic: give --image-size N"),
                        (["--onnx", str(nets / "resnet18.onnx"), "--image-size", "64", "--pipeline-splits", "nope"],
                         "'nope' names no block, node or module path")):
        done = _run(tmp_path, "predict", *args, "--plot", "sweep.png")
        assert done.returncode == 2, (args, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.onnx"]


def test_a_graph_from_the_dynamo_exporter_predicts_and_a_folded_norm_is_named(tmp_path):
    """torch's default (dynamo) exporter writes its weights beside the graph (``.onnx.data``) and its
    optimiser folds batch norm into the convolutions: the graph predicts, with a warning that says so."""
    import torch

    from tests.models.torch_resnet_ref import ResNetRef

    pytest.importorskip("onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(ResNetRef("resnet18", num_classes=10).train(), (torch.randn(2, 3, 64, 64),),
                          str(tmp_path / "r18.onnx"), dynamo=True, verbose=False)
    done = _run(tmp_path, "predict", "--onnx", "r18.onnx", "--system", "POD16", "--global-batch", "2560", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["predictions"][0]["images_per_s"] > 0
    assert "the graph has no normalisation layer" in done.stderr and "dynamo=False" in done.stderr


def test_with_a_config_the_image_size_of_an_onnx_graph_is_the_config_datasets(nets, tmp_path):
    """A graph of dynamic size with --config: the size poprun-train would run it at (the config's dataset:
    28 px for the shipped Fashion-MNIST subset), without --image-size; the sweep says what it holds."""
    done = _run(tmp_path, "predict", "--config", "default", "--onnx", str(nets / "resnet18.onnx"),
                "--micro-batch", "8,16", "--gradient-accumulation", "2", "--json")
    assert done.returncode in (0, 1), done.stderr
    sweep = json.loads(done.stdout)
    assert {r["image_size"] for r in sweep["rows"]} == {28}
    assert [(r["micro_batch"], r["gradient_accumulation"], r["global_batch"]) for r in sweep["rows"]
            if r["status"] != "cannot run"] and sweep["batch_rule"].startswith("gradient accumulation held at 2")
