"""Which public classification networks predict and train from ONNX: one markdown table row per model.

    ../zoo-venv/bin/python bench/zoo.py [--models resnet18,mobilenet_v3_small] [--timm] [--size 64]
        [--batch 4] [--updates 3] [--steps 3] [--out zoo.md]

Every classification model of ``torchvision.models.list_models(module=torchvision.models)`` (``weights=None``:
nothing is downloaded; 10 classes), or those of ``--models``, plus a short list of timm models with ``--timm``
when timm is installed. Each is built at ``--size`` pixels where it takes that size, else at the smallest of a
few larger sizes it runs at (and its exporter writes it at), exported with torch's TorchScript exporter in training mode without constant
folding (opset 17; opset 20 where the graph has torch's exact GELU as Erf), and read by ``models.onnx``:

* exported: the export ran (and at what opset and size);
* predicts: ``poprun-ipu check``'s prediction verdict is clean (``models.onnx.check``) and the profile's rows
  (``ProfiledGraph.profile``) come out;
* trains: its training verdict is clean and ``--updates`` SGD updates of the float32 graph model run with a
  finite loss;
* gradients equal: one step in float64 (logits and every parameter gradient, named as torch names them, for
  random data and random logit gradients) against torch's within 1e-10, relative to each tensor's largest
  value (or to 1e-4 of the model's largest gradient, where a gradient cancels to almost nothing, as a conv's
  bias before a batch norm, whose exact gradient is 0 and whose float64 one is rounding noise); dropout and
  stochastic depth are set to 0 for this export only (their masks are not torch's draws), and weights
  initialised to zero (ViT's head) are drawn small and random, so that the gradients behind them are not all zero.
  Where a network's float64 gradients cancel over many orders of magnitude, torch does not agree with itself to
  1e-10 either: torch's step runs in its default layout and channels-last, and a difference within 10 times
  theirs also counts as equal, with both figures shown (Inception-v3: gradients near 1e7 at 96 px);
* step ms: the median float32 training step (forward, loss, backward) of ``--steps``, on ``--threads``;
* torch ms: torch's median float32 training step of the same network and batch on the same threads, channels-last;
* first blocker: the first line of ``poprun-ipu check`` (or the error of the stage that failed).

Each model runs in a subprocess of its own (``--one NAME``), under ``--timeout`` seconds: a crash, an out-of-memory
kill or a time-out of one model is its row's first blocker and the loop goes on. ``--kwargs name:key=value,...``
passes torchvision constructor arguments (smaller variants: ``vit_b_16:num_layers=2,hidden_dim=96,mlp_dim=192``).

torchvision does not import beside the project's torch: run this from a venv of its own (docs/onnx.md), with
the project on ``PYTHONPATH`` or installed there. A benchmark-style script: it prints, it asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import math
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (64, 96, 128, 160, 224, 299)  # tried in order after --size until torch runs the model
TIMM_MODELS = ("resnet10t", "resnet26d", "efficientnet_b0", "efficientnet_b0_gn", "mobilenetv3_small_050",
               "mobilenetv3_large_100", "convnext_atto", "vit_tiny_patch16_224", "deit_tiny_patch16_224",
               "ghostnet_100", "mobilevitv2_050")
EXTRA_KWARGS = {"inception_v3": {"aux_logits": False, "init_weights": True}, "googlenet": {"aux_logits": False,
                                                                                            "init_weights": True}}
RTOL = 1e-10
NOISE_FACTOR = 10  # beyond RTOL, equal when within this many times torch's own float64 spread between two layouts
HEADER = ("| model | exported | predicts | trains | gradients equal | step ms | torch ms | first blocker |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- |")
COLUMNS = ("exported", "predicts", "trains", "gradients equal", "step ms", "torch ms", "first blocker")


def build(name: str, timm_model: bool, size: int, classes: int, extra: dict | None = None):
    """The network and the image size it runs at (``size`` or a larger one of ``SIZES``)."""
    import torch

    if timm_model:
        import timm

        def make(s):
            try:
                return timm.create_model(name, pretrained=False, num_classes=classes, img_size=s)
            except TypeError:
                return timm.create_model(name, pretrained=False, num_classes=classes)
    else:
        import torchvision

        def make(s):
            kwargs = {**EXTRA_KWARGS.get(name, {}), **(extra or {})}
            if name.startswith("vit_"):
                kwargs["image_size"] = s
            return torchvision.models.get_model(name, weights=None, num_classes=classes, **kwargs)

    errors = []
    for s in [size] + [s for s in SIZES if s > size]:
        try:
            torch.manual_seed(0)
            net = make(s).train()
            with torch.no_grad():
                out = net(torch.randn(2, 3, s, s))
            if not isinstance(out, torch.Tensor) or out.shape != (2, classes):
                raise ValueError(f"output {type(out).__name__} {getattr(out, 'shape', '')}")
            return net, s
        except Exception as e:  # too small for its pooling, or a fixed size
            errors.append(f"{s}px: {_line(e)}")
    raise RuntimeError("; ".join(errors[-2:]))


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160]


def export(net, size: int, batch: int, opset: int) -> bytes:
    import torch

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.train(), (torch.randn(batch, 3, size, size),), f, dynamo=False, opset_version=opset,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["images"], output_names=["logits"])
    return f.getvalue()


def built_and_exported(name: str, timm_model: bool, args):
    """(net, size, ONNX bytes at opset 17): at ``args.size``, or the next of ``SIZES`` where both torch runs the
    network and its exporter writes it (AlexNet's and VGG's adaptive pooling exports only where the output size
    divides the input's)."""
    errors, start = [], args.size
    while True:
        net, size = build(name, timm_model, start, args.classes, _kwargs(args.kwargs).get(name))
        try:
            return net, size, export(net, size, args.batch, 17)
        except Exception as e:
            errors.append(f"{size}px: {_line(e)}")
            later = [s for s in SIZES if s > size]
            if not later:
                raise RuntimeError("; ".join(errors[-2:])) from None
            start = later[0]


def torch_step_ms(net, size: int, batch: int, steps: int, classes: int) -> float:
    """torch's median float32 training step (forward, cross-entropy, backward) of the same network and batch, on
    the same threads, channels-last."""
    import torch

    net = net.float().train().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, size, size).to(memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (batch,))
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        net.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), labels).backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) * 1e3


def no_randomness(net) -> None:
    """Dropout and stochastic depth at 0 (in place)."""
    for m in net.modules():
        if type(m).__name__ in ("Dropout", "Dropout2d", "StochasticDepth", "DropPath") and hasattr(m, "p"):
            m.p = 0.0
        if type(m).__name__ == "DropPath" and hasattr(m, "drop_prob"):
            m.drop_prob = 0.0


def no_zero_weights(net) -> None:
    """Weights initialised to zero (torchvision's ViT head) drawn small and random (in place), so that every gradient
    of the check is not zero in both."""
    import torch

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            if p.ndim >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def _rel(got, want, floor: float) -> float:
    import numpy as np

    return float(np.abs(got - want).max() / max(np.abs(want).max(), floor, 1e-300))


def gradients(net, data: bytes, shape) -> tuple[float, str, float]:
    """The largest relative difference of one float64 step from torch's, where, and torch's own: the largest
    difference between torch's float64 step in its default layout and channels-last (the rounding noise of the
    problem itself; a network whose gradients cancel by many orders of magnitude shows it)."""
    import numpy as np
    import onnx
    import torch

    from models.onnx import load_graph
    from models.onnx.network import graph_model

    model = graph_model(load_graph(onnx.load_from_string(data), batch_size=shape[0]), np.float64)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    logits = model.forward(x.transpose(0, 2, 3, 1).copy(), training=True)
    dlogits = rng.standard_normal(logits.shape)
    model.backward(dlogits, need_dx=False)
    net = net.double().train().to(memory_format=torch.contiguous_format)

    def step(fmt):
        net.to(memory_format=fmt)
        net.zero_grad()
        out = net(torch.from_numpy(x.copy()).to(memory_format=fmt))
        out.backward(torch.from_numpy(dlogits))
        return out.detach().numpy(), {k: p.grad.numpy().copy() for k, p in net.named_parameters() if p.grad is not None}

    ref_cl, theirs_cl = step(torch.channels_last)
    ref, theirs = step(torch.contiguous_format)
    floor = 1e-4 * max((float(np.abs(g).max()) for g in theirs.values()), default=0.0)
    own = max([_rel(ref_cl, ref, 0.0)] + [_rel(theirs_cl[k], g, floor) for k, g in theirs.items()])
    worst = _rel(logits, ref, 0.0)
    where = "logits"
    for site in model.sites:
        want = theirs.get(site.initializer)
        if want is None:
            return math.inf, f"{site.initializer} is no torch parameter", own
        got = site.to_onnx(site.param.grad).reshape(want.shape)
        rel = _rel(got, want, floor)
        if rel > worst:
            worst, where = rel, site.initializer
    missing = sorted(set(theirs) - {s.initializer for s in model.sites})
    if missing:
        return math.inf, f"torch parameters not in the graph: {', '.join(missing[:3])}", own
    return worst, where, own


def train(data: bytes, batch: int, updates: int, steps: int) -> tuple[str, float]:
    """``updates`` SGD updates of the float32 graph model (losses) and the median step time (ms)."""
    import numpy as np
    import onnx

    from models.loss import softmax_cross_entropy
    from models.onnx import load_graph
    from models.onnx.network import graph_model

    model = graph_model(load_graph(onnx.load_from_string(data), batch_size=batch))
    n, c, h, w = model.graph.input_shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, h, w, c)).astype(np.float32)
    labels = rng.integers(0, model.graph.output_shapes[0][1], batch)
    losses, times = [], []
    for i in range(max(updates, steps + 1)):
        t0 = time.perf_counter()
        loss, dlogits = softmax_cross_entropy(model.forward(x, training=True), labels)
        model.backward(dlogits, need_dx=False)
        times.append(time.perf_counter() - t0)
        if i < updates:
            losses.append(float(loss))
            for p in model.params():
                p.data -= 0.01 * p.grad
    if not all(math.isfinite(v) for v in losses):
        raise FloatingPointError(f"loss {losses}")
    return " -> ".join(f"{v:.3f}" for v in losses[:1] + losses[-1:]), statistics.median(times[1:]) * 1e3


def partial(name: str, cells: dict) -> None:
    """The row so far, printed after each stage: a model killed at its time limit keeps what it got to."""
    print(ROW + json.dumps(_format(name, cells)), flush=True)


def row(name: str, timm_model: bool, args) -> str:
    import onnx

    from models.onnx import OnnxFile, ProfiledGraph
    from models.onnx.check import check_file

    cells = dict(EMPTY)
    try:
        net, size, data = built_and_exported(name, timm_model, args)
        opset = 17
        if any(n.op_type == "Erf" for n in onnx.load_from_string(data).graph.node):
            data, opset = export(net, size, args.batch, 20), 20
        cells["exported"] = f"yes (opset {opset}, {size}px)"
        partial(name, {**cells, "predicts": "not reached", "trains": "not reached"})
    except Exception as e:
        cells["first blocker"] = f"export: {_line(e)}"
        return _format(name, cells)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        Path(path).write_bytes(data)
        try:
            report = check_file(OnnxFile(path, name), size)
        except Exception as e:
            cells["first blocker"] = f"check: {_line(e)}"
            return _format(name, cells)
    blockers = report.predict.lines or report.train.lines
    cells["first blocker"] = blockers[0] if blockers else ""
    if report.predict.clean:
        try:
            from models.onnx import load_graph

            ProfiledGraph(load_graph(onnx.load_from_string(data), batch_size=args.batch)).profile(args.batch)
            cells["predicts"] = "yes"
        except Exception as e:
            cells["predicts"], cells["first blocker"] = "no", f"profile: {_line(e)}"
    else:
        cells["predicts"] = "no"
    if not report.train.clean:
        cells["trains"] = "no"
        return _format(name, cells)
    partial(name, {**cells, "trains": "not reached"})
    try:
        losses, ms = train(data, args.batch, args.updates, args.steps)
        cells["trains"], cells["step ms"] = f"yes (loss {losses})", f"{ms:.1f}"
        partial(name, {**cells, "gradients equal": "not reached"})
        cells["torch ms"] = f"{torch_step_ms(net, size, args.batch, args.steps, args.classes):.1f}"
        partial(name, {**cells, "gradients equal": "not reached"})
    except Exception as e:
        cells["trains"], cells["first blocker"] = "no", f"train: {_line(e)}"
        if args.verbose:
            traceback.print_exc()
        return _format(name, cells)
    try:
        no_randomness(net)
        no_zero_weights(net)
        exact = export(net.float(), size, 2, opset)
        worst, where, own = gradients(net, exact, (2, 3, size, size))
        if worst <= RTOL:
            cells["gradients equal"] = f"yes ({worst:.0e})"
        elif worst <= NOISE_FACTOR * own:
            cells["gradients equal"] = f"yes ({worst:.0e} at {where}; torch's own two layouts: {own:.0e})"
        else:
            cells["gradients equal"] = f"no ({worst:.1e} at {where}; torch's own two layouts: {own:.0e})"
    except Exception as e:
        cells["gradients equal"] = f"no ({_line(e)})"
        if args.verbose:
            traceback.print_exc()
    return _format(name, cells)


def _format(name: str, cells: dict) -> str:
    text = [name] + [str(cells[k]).replace("|", "/") for k in COLUMNS]
    return "| " + " | ".join(text) + " |"


def _kwargs(text: str | None) -> dict[str, dict]:
    """``name:key=value,key=value;name2:...`` -> {name: {key: value}} (values read as Python literals)."""
    import ast

    out: dict[str, dict] = {}
    for part in (text or "").split(";"):
        if ":" not in part:
            continue
        name, pairs = part.split(":", 1)
        for pair in pairs.split(","):
            key, value = pair.split("=", 1)
            try:
                value = ast.literal_eval(value)
            except ValueError:
                pass
            out.setdefault(name.strip(), {})[key.strip()] = value
    return out


def isolated(name: str, timm_model: bool, args) -> str:
    """The row of one model, computed in a subprocess of its own under ``args.timeout`` seconds; a crash, a kill (out
    of memory) or the time-out is the row's first blocker."""
    cmd = [sys.executable, __file__, "--one", name, "--size", str(args.size), "--batch", str(args.batch),
           "--classes", str(args.classes), "--updates", str(args.updates), "--steps", str(args.steps),
           "--threads", str(args.threads)] + (["--timm"] if timm_model else []) + \
        (["--kwargs", args.kwargs] if args.kwargs else []) + (["--verbose"] if args.verbose else [])
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rows = [line for line in out.splitlines() if line.startswith(ROW)]
        if rows:  # what it got to: the stages after it are "not reached"
            row = json.loads(rows[-1][len(ROW):])
            first = True
            while "| not reached |" in row:  # the stage it was in timed out; those after it were not reached
                row = row.replace("| not reached |", f"| timed out ({args.timeout} s) |" if first else "| - |", 1)
                first = False
            return row
        return _format(name, {**EMPTY, "first blocker": f"timed out after {args.timeout} s"})
    if args.verbose and done.stderr:
        sys.stderr.write(done.stderr)
    rows = [line for line in done.stdout.splitlines() if line.startswith(ROW)]
    if rows:
        return json.loads(rows[-1][len(ROW):])
    why = f"killed by signal {-done.returncode} (out of memory?)" if done.returncode < 0 else \
        f"exit status {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:160]}"
    return _format(name, {**EMPTY, "first blocker": f"crashed: {why}"})


ROW = "ZOO-ROW "
EMPTY = {"exported": "no", "predicts": "-", "trains": "-", "gradients equal": "-", "step ms": "-", "torch ms": "-",
         "first blocker": ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated torchvision names (default: every classification model)")
    ap.add_argument("--timm", action="store_true", help="also a short list of timm models, when timm is installed")
    ap.add_argument("--timm-only", action="store_true", help="the timm models only (those of --models, if given)")
    ap.add_argument("--size", type=int, default=64, help="image size, where the model takes it (default 64)")
    ap.add_argument("--batch", type=int, default=4, help="batch of the training updates and step time")
    ap.add_argument("--classes", type=int, default=10, help="classes of each classifier")
    ap.add_argument("--updates", type=int, default=3, help="SGD updates of the float32 graph model")
    ap.add_argument("--steps", type=int, default=3, help="steps timed (after one warm-up)")
    ap.add_argument("--threads", type=int, default=1, help="numba, BLAS and torch threads")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per model (its subprocess is killed after)")
    ap.add_argument("--kwargs", help="constructor arguments: name:key=value,...;name2:... (torchvision models)")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the subprocess of one model
    ap.add_argument("--out", type=Path, help="also write the table here")
    ap.add_argument("--verbose", action="store_true", help="tracebacks of failed stages on stderr")
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    if args.one:
        print(ROW + json.dumps(row(args.one, args.timm, args)), flush=True)
        return
    import torchvision

    names = [] if args.timm_only else [(n, False) for n in (args.models.split(",") if args.models else
                                                            torchvision.models.list_models(module=torchvision.models))]
    if args.timm or args.timm_only:
        if importlib.util.find_spec("timm") is None:
            print("timm is not installed: torchvision's models only", file=sys.stderr)
        else:
            names += [(n, True) for n in TIMM_MODELS if not (args.timm_only and args.models)
                      or n in args.models.split(",")]
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}; {args.size}px where the model takes "
          f"it, batch {args.batch}, {args.classes} classes, {args.threads} thread(s), {args.timeout} s per model"
          + (f", constructor arguments {args.kwargs}" if args.kwargs else ""))
    print(HEADER)
    rows = [HEADER]
    for name, timm_model in names:
        line = isolated(name, timm_model, args)
        print(line, flush=True)
        rows.append(line)
    if args.out:
        args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
