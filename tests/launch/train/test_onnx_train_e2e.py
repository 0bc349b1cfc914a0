"""``poprun-train --set model.onnx=PATH``: a small CNN exported from torch in training mode trains under the
launcher, and how the replicas are split over instances does not change its losses; bad input stops the run
before it starts; the trained file loads in torch. The export of the default job's efficientnet-tiny trains as
the built-in, bitwise: under 2 instances x 4 replicas, with 16.16 emulation, resumed after a kill, pipelined
over two IPUs; with drop-connect and dropout active, 1x4, 2x2 and 4x1 give the same weights."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from data.dataset import open_dataset
from data.sources import dataset_path
from ipu.cost.prediction import predict
from launch.train.config_file import load_config
from launch.train.plan import graph_plan, ipu_plan
from models.onnx import OnnxFile, open_for_prediction
from launch.train.checkpoint import split_prefix
from tests.launch.train.train_runs import final_state, losses, ok, train

torch = pytest.importorskip("torch")
from tests.launch.train.onnx_nets import TinyNet, export_tiny  # noqa: E402  (torch first)


def onnx_args(path: str, *extra: str) -> list[str]:
    return ["--config", "dense", "--set", f"model.onnx={path}", "--set", "run.max_steps=6",
            "--set", "run.evaluate=false", "--set", "run.plots=false", "--set", "run.progress_bar=false",
            "--set", "data.replicas=2", *extra]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return export_tiny(tmp_path_factory.mktemp("onnx") / "tiny.onnx")


def test_an_onnx_network_trains_bitwise_alike_over_one_or_two_instances(tiny, tmp_path):
    got = {}
    for instances in (1, 2):
        run_dir = tmp_path / f"{instances}x{2 // instances}"
        ok(train(onnx_args(tiny), run_dir, instances=instances, replicas=2))
        got[instances] = losses(run_dir)
    assert len(got[1]) == 6 and np.all(np.isfinite(got[1]))
    np.testing.assert_array_equal(got[2], got[1])
    # the POD prediction is the graph's, as poprun-ipu predict --onnx costs it for the same plan
    summary = json.loads((tmp_path / "1x2" / "summary.json").read_text())
    cfg = load_config("dense", [a for a in onnx_args(tiny) if a.startswith(("model.", "run.", "data."))])
    info = open_dataset(dataset_path(cfg.data.path), "train").info
    plan = ipu_plan(cfg, info.image_shape, info.num_classes, info.num_samples)
    assert plan.model == "onnx:tiny.onnx" and plan.model_overrides == () and plan.image_channels == 1
    file = OnnxFile(tiny, tiny)
    profiles, probe, classes = open_for_prediction(file, plan.micro_batch)
    # the graph's activation and norm, which the profile does not say
    plan = replace(plan, workload=graph_plan(plan, file.label, probe, classes).workload)
    assert summary["predicted_pod"] == plan.system
    rows = profiles.rows(plan.micro_batch, plan.image_size)
    assert summary["predicted_pod_images_per_s"] == pytest.approx(predict(plan, rows).images_per_s, rel=1e-12)
    check_trained_onnx(tiny, tmp_path / "1x2" / "model.onnx", tmp_path / "1x2")
    # the written file does not depend on the instance split (replica 0's batch-norm statistics)
    import onnx
    from onnx import numpy_helper

    written = [{i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / run / "model.onnx")).graph.initializer}
               for run in ("1x2", "2x1")]
    assert written[0].keys() == written[1].keys()
    for name, value in written[0].items():
        np.testing.assert_array_equal(written[1][name], value, err_msg=name)


def validation_images(n: int = 8) -> np.ndarray:
    """The first ``n`` validation images of the dense config's dataset, normalised as the loader does: NHWC float32."""
    val = open_dataset(dataset_path("data/fashion-mnist-subset.h5"), "validation")
    try:
        images = val.read_all()[:n].astype(np.float64)
        mean, std = np.asarray(val.info.mean), np.asarray(val.info.std)
    finally:
        val.close()
    if images.max() > 1.5:  # stored as bytes
        images /= 255.0
    return ((images - mean) / std).astype(np.float32)


def check_trained_onnx(original: str, trained, run_dir=None) -> None:
    """The trained file loads in torch by initializer names and gives, in eval mode, the logits of the trained
    engine's own final weights (the last checkpoint of ``run_dir``: the parameters and replica 0's batch-norm
    statistics put into the graph model of the original file) on validation images."""
    import onnx
    from onnx import numpy_helper

    from launch.train.checkpoint import find_latest, load_checkpoint, split_prefix
    from models.onnx import load_graph
    from models.onnx.network import graph_model

    proto = onnx.load(str(trained))
    sd = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in proto.graph.initializer}
    net = TinyNet().eval()
    state = net.state_dict()
    assert {k for k in state if not k.endswith("num_batches_tracked")} <= set(sd)
    net.load_state_dict({k: v for k, v in sd.items() if k in state}, strict=False)
    before = {i.name: numpy_helper.to_array(i) for i in onnx.load(original).graph.initializer}
    assert not np.array_equal(sd["fc.weight"].numpy(), before["fc.weight"])  # trained
    assert not np.array_equal(sd["stem.1.running_mean"].numpy(), before["stem.1.running_mean"])
    x = validation_images()
    if run_dir is None:
        engine = graph_model(load_graph(proto, batch_size=len(x))).forward(x, training=False)
    else:
        arrays, _ = load_checkpoint(find_latest(run_dir))
        model = graph_model(load_graph(original, batch_size=len(x)))  # the untrained file + the checkpoint
        weights = split_prefix(arrays, "model")
        assert set(weights) == {p.name for p in model.params()}
        for p in model.params():
            np.copyto(p.data, weights[p.name])
        stats = split_prefix(arrays, "replica/0")
        assert set(stats) == set(model.buffers())
        for key, value in model.buffers().items():
            np.copyto(value, stats[key])
        engine = model.forward(x, training=False)
    with torch.no_grad():
        ref = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
    assert engine.shape == ref.shape == (len(x), 10)
    np.testing.assert_allclose(ref, engine, rtol=1e-4, atol=1e-5)


def topk_model(path) -> str:
    """A graph with an op the engine has no layer for (TopK)."""
    from onnx import TensorProto, helper, numpy_helper, save

    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, [None, 1, 28, 28])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 10])
    w = numpy_helper.from_array(np.zeros((784, 10), np.float32), "w")
    k = numpy_helper.from_array(np.array([10], np.int64), "k")
    shape = numpy_helper.from_array(np.array([-1, 784], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["images", "shape"], ["flat"], name="flatten"),
             helper.make_node("MatMul", ["flat", "w"], ["scores"], name="fc"),
             helper.make_node("TopK", ["scores", "k"], ["logits", "idx"], name="topk")]
    graph = helper.make_graph(nodes, "topk", [x], [y], [w, k, shape])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("case", ["unsupported_op", "class_count", "no_file"])
def test_bad_onnx_input_exits_2_with_one_line_and_writes_nothing(case, tmp_path):
    if case == "unsupported_op":
        path, words = topk_model(tmp_path / "topk.onnx"), ("TopK", "topk")
    elif case == "no_file":
        path, words = str(tmp_path / "none.onnx"), ("model.onnx=", "none.onnx: no such file")
    else:
        path, words = export_tiny(tmp_path / "seven.onnx", classes=7), ("7 classes", "model.num_classes=10")
    run_dir = tmp_path / "run"
    proc = train(onnx_args(path), run_dir)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert all(w in errors[0] for w in words), errors[0]
    assert "Traceback" not in proc.stderr
    assert not run_dir.exists()


def test_the_config_names_the_file_and_the_check_reads_it(tmp_path):
    """Loading a configuration reads no file: ``open_model_file`` (before the run directory) does."""
    from launch.train.build import open_model_file

    cfg = load_config("dense", [f"model.onnx={tmp_path / 'later.onnx'}"])
    assert cfg.model.onnx.endswith("later.onnx")
    with pytest.raises(ValueError, match="later.onnx: no such file"):
        open_model_file(cfg)
    with pytest.raises(ValueError, match="TopK"):
        open_model_file(load_config("dense", [f"model.onnx={topk_model(tmp_path / 'later.onnx')}"]))


def test_a_graph_with_folded_norms_trains_with_one_warning(tmp_path, caplog):
    """An eval-mode export folds batch norm into the convolutions: the trainer's check warns once, with the
    prediction's message (``models.onnx.folded_norm_warning``) and the export that keeps the norms."""
    from launch.train.build import open_model_file

    torch.manual_seed(0)
    path = str(tmp_path / "folded.onnx")
    torch.onnx.export(TinyNet().eval(), (torch.randn(2, 1, 28, 28),), path, dynamo=False, do_constant_folding=True,
                      input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    cfg = load_config("dense", [f"model.onnx={path}"])
    with caplog.at_level("WARNING"):
        open_model_file(cfg)
    warned = [r.getMessage() for r in caplog.records if "no normalisation layer" in r.getMessage()]
    assert len(warned) == 1 and "it trains without normalisation" in warned[0] and "dynamo=False" in warned[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        open_model_file(load_config("dense", [f"model.onnx={export_tiny(tmp_path / 'bn.onnx')}"]))
    assert not [r for r in caplog.records if "no normalisation layer" in r.getMessage()]


def test_model_num_classes_replaces_the_classifier_end_to_end(tmp_path):
    """A 7-class export trained on the 10-class dataset with model.num_classes=10: the run finishes and its
    run_dir/model.onnx has a 10-way classifier that torch loads into a 10-class network. The log and
    summary.json name the file's model (``onnx:seven.onnx``), not ``model.name``'s default."""
    import onnx
    from onnx import numpy_helper

    from models.onnx import load_graph

    path = export_tiny(tmp_path / "seven.onnx", classes=7)
    run_dir = tmp_path / "run"
    proc = train(onnx_args(path, "--set", "model.num_classes=10"), run_dir, instances=1, replicas=2)
    ok(proc)
    assert len(losses(run_dir)) == 6
    assert "Training onnx:seven.onnx on " in proc.stderr and "Training efficientnet-tiny" not in proc.stderr
    assert json.loads((run_dir / "summary.json").read_text())["config_model"] == "onnx:seven.onnx"
    proto = onnx.load(str(run_dir / "model.onnx"))
    sd = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    assert sd["fc.weight"].shape == (10, 8) and sd["fc.bias"].shape == (10,)
    assert load_graph(proto, batch_size=2).output_shapes[0] == (2, 10)
    net = TinyNet(10).eval()
    net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in sd.items() if k in net.state_dict()}, strict=False)
    with torch.no_grad():
        assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)


def default_job(*extra: str) -> list[str]:
    """The default job's settings (efficientnet-tiny, group norm, dropout and drop-connect 0.1, LARS, polynomial
    schedule, 4 replicas), 4 updates, no evaluation."""
    return ["--config", "default", "--set", "run.max_steps=4", "--set", "run.evaluate=false", "--set", "run.plots=false",
            "--set", "run.progress_bar=false", *extra]


def builtin_export(tmp_path, depth: float | None = None) -> str:
    """The default job's built-in network (at ``depth``) with its initial weights, exported by torch."""
    from launch.train.build import build_net
    from tests.models.onnx_builtin import export_builtin

    options = [] if depth is None else [f"model.options={{norm: group, dropout: 0.1, drop_connect: 0.1, depth: {depth}}}"]
    cfg = load_config("default", options)
    assert cfg.optim.name == "lars" and cfg.model.kwargs["drop_connect"] == 0.1 and cfg.model.kwargs["dropout"] == 0.1
    info = open_dataset(dataset_path(cfg.data.path), "train").info
    path = tmp_path / f"efficientnet-tiny-{depth}.onnx"
    path.write_bytes(export_builtin(build_net(cfg, info), depth=depth))
    return str(path)


def test_the_onnx_export_of_efficientnet_tiny_trains_as_the_builtin_bitwise(tmp_path):
    """The default job and the same job with ``model.onnx`` = the ONNX export of its network (``torch_efficientnet_ref``
    at the same width and depth, the built-in's initial weights), both under ``poprun_py --num-instances 2
    --num-replicas 4`` with LARS: the same losses and the same final weights (by the same names), bitwise. The
    importer runs the graph's norm + SiLU, squeeze-excitation and stochastic depth as the built-in's layers."""
    path = builtin_export(tmp_path)
    got, weights = {}, {}
    for name, extra in (("builtin", []), ("onnx", ["--set", f"model.onnx={path}"])):
        ok(train(default_job(*extra), tmp_path / name, instances=2, replicas=4))
        got[name] = losses(tmp_path / name)
        weights[name] = split_prefix(final_state(tmp_path / name, 4), "model")
    assert len(got["builtin"]) == 4 and np.all(np.isfinite(got["builtin"]))
    np.testing.assert_array_equal(got["onnx"], got["builtin"])
    assert weights["onnx"].keys() == weights["builtin"].keys()
    for key, value in weights["builtin"].items():
        np.testing.assert_array_equal(weights["onnx"][key], value, err_msg=key)


def test_an_imported_network_with_stochastic_depth_and_dropout_trains_alike_over_1x4_2x2_4x1(tmp_path):
    """The efficientnet-tiny export at depth 0.5 (drop-connect in three blocks, dropout before the classifier):
    1 x 4, 2 x 2 and 4 x 1 instances x replicas give the same weights, bitwise."""
    path = builtin_export(tmp_path, depth=0.5)
    weights = {}
    for instances in (1, 2, 4):
        run_dir = tmp_path / f"{instances}x{4 // instances}"
        ok(train(default_job("--set", f"model.onnx={path}"), run_dir, instances=instances, replicas=4))
        weights[instances] = split_prefix(final_state(run_dir, 4), "model")
    for instances in (2, 4):
        assert weights[instances].keys() == weights[1].keys()
        for key, value in weights[1].items():
            np.testing.assert_array_equal(weights[instances][key], value, err_msg=f"{instances} instances: {key}")


def test_an_imported_network_emulates_16_16_as_the_builtin_and_resumes_bitwise(tmp_path):
    """With the IPU's 16.16 numerics emulated (float16 compute and weights, stochastic rounding, loss scaling 128)
    the efficientnet-tiny export trains as the built-in, bitwise; killed after update 3 and resumed from its
    update-2 checkpoint (``--resume auto``), it ends with the uninterrupted run's losses and checkpoint
    (weights, optimizer state), bitwise."""
    path = builtin_export(tmp_path)
    half = default_job("--set", "ipu.emulate_precision=true", "--set", 'ipu.precision="16.16"',
                       "--set", "loss_scaling.initial_scale=128", "--set", "run.checkpoint_every=2",
                       "--set", "data.replicas=2")
    onnx_args_ = [*half, "--set", f"model.onnx={path}"]
    ok(train(half, tmp_path / "builtin"))
    ok(train(onnx_args_, tmp_path / "onnx"))
    killed = train(onnx_args_, tmp_path / "resumed", fault="instance=0,at=step 3,signal=KILL")
    assert killed.returncode == -9, killed.stderr[-2000:]
    ok(train([*onnx_args_, "--resume", "auto"], tmp_path / "resumed"))
    np.testing.assert_array_equal(losses(tmp_path / "onnx"), losses(tmp_path / "builtin"))
    np.testing.assert_array_equal(losses(tmp_path / "resumed"), losses(tmp_path / "onnx"))
    want = final_state(tmp_path / "onnx", 4)
    assert any(k.startswith("optim/") for k in want)
    for run in ("builtin", "resumed"):
        got = final_state(tmp_path / run, 4)
        assert got.keys() == want.keys(), run
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{run}: {key}")


def test_an_imported_network_pipelines_over_two_ipus_split_at_a_named_module(tmp_path):
    """``ipu.pipeline_splits=[features.4]`` (a torch module path of the graph's node names) cuts the graph model
    into blocks ``input`` and ``features.4`` on two IPUs: the compile step fits each IPU's blocks, and the run
    gives the losses of the built-in pipelined at the same place (``block4a``), bitwise."""
    path = builtin_export(tmp_path)
    piped = default_job("--set", "data.replicas=2", "--set", "data.grad_accum=4", "--set", "data.micro_batch=4",
                        "--set", "ipu.ipus_per_replica=2")
    got = {}
    for name, extra in (("builtin", ["--set", "ipu.pipeline_splits=[block4a]"]),
                        ("onnx", ["--set", f"model.onnx={path}", "--set", "ipu.pipeline_splits=[features.4]"])):
        proc = train([*piped, *extra], tmp_path / name, instances=1, replicas=2, launcher=["--ipus-per-replica", "2"])
        ok(proc)
        got[name] = losses(tmp_path / name)
    report = [line for line in (proc.stdout + proc.stderr).splitlines() if " features.4 " in line]
    assert report and report[0].rstrip().endswith("yes"), proc.stdout[-3000:]  # IPU 1 holds features.4, and fits
    assert len(got["onnx"]) == 4
    np.testing.assert_array_equal(got["onnx"], got["builtin"])
