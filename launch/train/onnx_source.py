"""``poprun-ipu predict|profile --onnx model.onnx``: the user's own network as the layer profile.

:func:`open_onnx` reads the file once (relative to the current directory) with ``models.onnx``, checks
the options against it (image size where the graph does not fix it, ``--num-classes``,
``--pipeline-splits``) and returns an :class:`OnnxSource` and the base plan with the graph's name,
image size and classes. The source is the ``profile_for`` hook of ``launch.predict.sweep_report``: the graph's
``LayerProfile`` rows at a plan's micro-batch and image size, cached per (path, micro-batch, image
size, blocks). The graph's activations and norms are the plan's workload (``IpuPlan.workload``), which
the cost model reads since the profile does not say which they are.

Every bad input is an ``OnnxImportError`` (a ``ValueError`` with a one-line message): the command
prints it and exits 2 before anything is written.
"""

from __future__ import annotations

import logging

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ipu.plan import IpuPlan, Workload
from models.onnx import Graph, OnnxImportError, ProfiledGraph, folded_norm_warning, load_graph
from models.onnx.blocks import split_starts
from models.profile import LayerProfile

_PROFILES: dict[tuple, tuple[LayerProfile, ...]] = {}
RELU_LIKE = ("Relu", "Clip")


logger = logging.getLogger(__name__)

def workload_of(graph: Graph) -> Workload:
    """The cost model's activation and norm for the graph: the commonest activation (ReLU/Clip: relu,
    others: swish, the transcendental one) and its norm (batch norm, or group norm with its groups).
    Two-pass norm statistics (Poplar's stable_norm) for group norm and for swish networks, as the
    EfficientNet recipe sets them and the built-in EfficientNets are costed; single-pass for ReLU
    networks with batch norm, as the MLPerf ResNet configs."""
    ops = Counter(n.op for n in graph.nodes)
    relu = sum(ops[o] for o in RELU_LIKE)
    other = sum(ops[o] for o in ("SiLU", "Sigmoid", "HardSwish", "HardSigmoid", "Tanh", "Gelu"))
    activation = "relu" if relu >= other else "swish"
    if ops["BatchNormalization"] >= ops["GroupNormalization"] + ops["InstanceNormalization"] + ops["LayerNormalization"]:
        return Workload(activation, "batch", 32, False, activation == "swish")
    groups = Counter(int(n.attrs.get("num_groups", 1)) for n in graph.nodes if n.op == "GroupNormalization")
    return Workload(activation, "group", groups.most_common(1)[0][0] if groups else 1, False, True)


@dataclass(frozen=True)
class OnnxSource:
    """``profile_for(plan)``: the graph's rows at the plan's micro-batch and image size."""

    path: Path  # resolved
    shown: str  # as the user wrote it
    blocks: str | tuple[str, ...]  # "prefix", or the nodes that start blocks
    aliases: tuple[tuple[str, str], ...]  # (node, the split's name as given) for the blocks it starts
    num_classes: int | None
    fixed_hw: tuple[int, int] | None  # the graph's own image size, if it fixes one

    def network(self, micro_batch: int, image_size: int) -> ProfiledGraph:
        size = None if self.fixed_hw == (image_size, image_size) else image_size
        graph = load_graph(self.path, image_size=size, batch_size=micro_batch)
        return ProfiledGraph(graph, self.blocks if isinstance(self.blocks, str) else list(self.blocks),
                           self.num_classes, name=self.path.name)

    def __call__(self, plan: IpuPlan) -> list[LayerProfile]:
        key = (str(self.path), plan.micro_batch, plan.image_size, self.blocks)
        if key not in _PROFILES:
            if len(_PROFILES) >= 16:
                _PROFILES.pop(next(iter(_PROFILES)))
            rows = self.network(plan.micro_batch, plan.image_size).profile(plan.micro_batch)
            names = dict(self.aliases)
            _PROFILES[key] = tuple(replace(r, block=names.get(r.block, r.block)) for r in rows)
        return list(_PROFILES[key])


def _where(shown: str) -> str:
    return f"--onnx {shown}"


def open_onnx(path: str, base: IpuPlan, image_sizes: Sequence[int] = (), num_classes: int | None = None,
              splits: Sequence[str] = ()) -> tuple[OnnxSource, IpuPlan]:
    """The source and ``base`` with the graph's model name, image size and classes (see the module doc)."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise OnnxImportError(f"{_where(path)}: no such file (from {Path.cwd()}): give the path of an .onnx file")
    fixed = _fixed_hw(resolved)
    if not image_sizes and fixed is None:
        raise OnnxImportError(f"{_where(path)}: the graph's image height and width are dynamic: give --image-size N")
    first = image_sizes[0] if image_sizes else fixed[0]  # type: ignore[index]
    probe = load_graph(resolved, image_size=None if fixed == (first, first) else first, batch_size=base.micro_batch)
    n, c, h, w = probe.input_shape
    if h != w:
        raise OnnxImportError(f"{_where(path)}: the graph's images are {h}x{w}; the IPU plan takes square images: "
                              f"give --image-size N")
    blocks, aliases = _blocks(probe, path, splits)
    net = ProfiledGraph(probe, list(blocks) if not isinstance(blocks, str) else blocks, num_classes,
                      name=resolved.name)
    source = OnnxSource(resolved, path, blocks, aliases, num_classes, fixed)
    for size in image_sizes[1:]:  # every size of a sweep is read before anything runs
        source.network(base.micro_batch, size)
    warning = folded_norm_warning(probe, _where(path), "the prediction leaves out the norms' cost")
    if warning:
        logger.warning(warning)
    model = f"onnx:{resolved.name}"
    # the base plan's recomputation checkpoint is a module of its own model: kept only when the graph has it
    keeps = base.recompute_until and any(base.recompute_until in node.name.split("/") for node in probe.nodes)
    plan = replace(base, model=model, model_overrides=(), image_size=h, image_channels=c,
                   num_classes=net.num_classes, pipeline_splits=(), device_mapping=(),
                   recompute_until=base.recompute_until if keeps else "", workload=workload_of(probe))
    return source, plan


def _fixed_hw(resolved: Path) -> tuple[int, int] | None:
    from models.onnx.graph import read_model

    model = read_model(resolved)
    init = {t.name for t in model.graph.initializer}
    x = next(i for i in model.graph.input if i.name not in init)
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in x.type.tensor_type.shape.dim]
    return (dims[2], dims[3]) if len(dims) == 4 and dims[2] > 0 and dims[3] > 0 else None


def _blocks(graph: Graph, shown: str, splits: Sequence[str]) -> tuple[str | tuple[str, ...], tuple]:
    """``prefix`` blocks when the splits name them (or none are given); else the nodes that start blocks and
    their names (``models.onnx.blocks.split_starts``, as the trainer cuts its graph model)."""
    starts = split_starts(graph, splits, shown, "--pipeline-splits")
    if not starts:
        return "prefix", ()
    return tuple(node for node, _ in starts), starts
