"""A user's ONNX file, read once per process, and what prediction and training take from it.

:class:`OnnxFile` reads the file once (``graph.read_model``); every ``Graph`` of it (at a batch size and an
image size) is made from that one ``ModelProto`` and kept, and the export of the trained weights
(``export.write_trained_onnx``) starts from it too. ``shown`` is how the user named the file
(``--onnx my.onnx``, ``model.onnx=my.onnx``): every error starts with it.

* Training (``model.onnx``): :func:`training_graph`, the graph at the dataset's image size and the
  micro-batch, checked against the dataset's channels and classes.
* Prediction (``poprun-ipu predict|profile --onnx``): :func:`open_for_prediction` checks the options against
  the graph (image size where the graph does not fix it, ``--num-classes``, ``--pipeline-splits``) and returns
  :class:`OnnxProfiles`, the graph's ``LayerProfile`` rows at any micro-batch and image size, and the probe
  graph (at the first image size) from which the plan takes the model's name, image size, classes and
  workload (``profile.cost_workload``).

Every bad input is an ``OnnxImportError`` (a ``ValueError`` with a one-line message).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from models.onnx.blocks import split_starts
from models.onnx.graph import load_graph, read_model
from models.onnx.ir import Graph, OnnxImportError
from models.onnx.profile import ProfiledGraph
from models.profile import LayerProfile


class OnnxFile:
    """The file at ``path`` (relative to the current directory), read once; ``shown``: how the user named it."""

    def __init__(self, path: str, shown: str) -> None:
        self.path, self.shown = Path(path).expanduser().resolve(), shown
        if not self.path.is_file():
            raise OnnxImportError(f"{shown}: no such file (from {Path.cwd()}): give the path of an .onnx file")
        self.given = str(path)  # errors of the graph name the file as given
        self.proto = read_model(self.path)
        self._graphs: dict[tuple, Graph] = {}

    @property
    def label(self) -> str:
        """The model's name in a plan: ``onnx:<file name>``."""
        return f"onnx:{self.path.name}"

    def fixed_hw(self) -> tuple[int, int] | None:
        """The graph's own image height and width, where its input fixes both."""
        init = {t.name for t in self.proto.graph.initializer}
        x = next(i for i in self.proto.graph.input if i.name not in init)
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in x.type.tensor_type.shape.dim]
        return (dims[2], dims[3]) if len(dims) == 4 and dims[2] > 0 and dims[3] > 0 else None

    def graph(self, image_size: int | tuple[int, int] | None, batch_size: int) -> Graph:
        """The graph at ``batch_size`` (where the file leaves it dynamic) and ``image_size`` (None: the file's),
        made once per pair."""
        key = (image_size, batch_size)
        if key not in self._graphs:
            self._graphs[key] = load_graph(self.proto, image_size=image_size, batch_size=batch_size, where=self.given)
        return self._graphs[key]


def training_graph(file: OnnxFile, image_shape: tuple[int, int, int], dataset_classes: int, micro_batch: int,
                   num_classes: int | None, dataset: str) -> Graph:
    """The graph at the dataset's image size (``image_shape``: H, W, C) and the micro-batch, checked against the
    dataset's channels and classes (``dataset``: its path, for the messages); ``num_classes``:
    ``model.num_classes``, which replaces the classifier."""
    h, w, c = image_shape
    graph = file.graph((h, w), micro_batch)
    if graph.input_shape[1] != c:
        raise OnnxImportError(f"{file.shown}: the graph reads {graph.input_shape[1]} channels, the dataset's images "
                              f"({dataset}) have {c}: export the network for {c}-channel input")
    classes = graph.output_shapes[0][-1] if graph.output_shapes else None
    if num_classes is None and classes != dataset_classes:
        raise OnnxImportError(f"{file.shown}: the classifier has {classes} classes, the dataset ({dataset}) "
                              f"{dataset_classes}; set model.num_classes={dataset_classes} to replace it")
    if num_classes is not None and num_classes != dataset_classes:
        raise OnnxImportError(f"model.num_classes={num_classes} but the dataset ({dataset}) has {dataset_classes}: "
                              f"set model.num_classes={dataset_classes}")
    return graph


class OnnxProfiles:
    """``rows(micro_batch, image_size)``: the graph's ``LayerProfile`` rows, in the blocks the splits name."""

    def __init__(self, file: OnnxFile, blocks: str | tuple[str, ...], aliases: tuple[tuple[str, str], ...],
                 num_classes: int | None) -> None:
        self.file, self.blocks, self.aliases, self.num_classes = file, blocks, aliases, num_classes
        self._rows: dict[tuple[int, int], tuple[LayerProfile, ...]] = {}

    def network(self, micro_batch: int, image_size: int) -> ProfiledGraph:
        size = None if self.file.fixed_hw() == (image_size, image_size) else image_size
        graph = self.file.graph(size, micro_batch)
        return ProfiledGraph(graph, self.blocks if isinstance(self.blocks, str) else list(self.blocks),
                             self.num_classes, name=self.file.path.name)

    def rows(self, micro_batch: int, image_size: int) -> list[LayerProfile]:
        key = (micro_batch, image_size)
        if key not in self._rows:
            names = dict(self.aliases)
            self._rows[key] = tuple(dataclasses.replace(r, block=names.get(r.block, r.block))
                                    for r in self.network(micro_batch, image_size).profile(micro_batch))
        return list(self._rows[key])


def open_for_prediction(file: OnnxFile, micro_batch: int, image_sizes: Sequence[int] = (),
                        num_classes: int | None = None, splits: Sequence[str] = ()) -> tuple[OnnxProfiles, Graph, int]:
    """The profiles of ``file``, its graph at the first image size (``image_sizes``, else the graph's own) and
    the graph's class count; every image size of a sweep is read before anything runs."""
    fixed = file.fixed_hw()
    if not image_sizes and fixed is None:
        raise OnnxImportError(f"{file.shown}: the graph's image height and width are dynamic: give --image-size N")
    first = image_sizes[0] if image_sizes else fixed[0]  # type: ignore[index]
    probe = file.graph(None if fixed == (first, first) else first, micro_batch)
    n, c, h, w = probe.input_shape
    if h != w:
        raise OnnxImportError(f"{file.shown}: the graph's images are {h}x{w}; the IPU plan takes square images: "
                              f"give --image-size N")
    starts = split_starts(probe, splits, file.shown, "--pipeline-splits")
    blocks = tuple(node for node, _ in starts) if starts else "prefix"
    profiles = OnnxProfiles(file, blocks, starts, num_classes)
    classes = profiles.network(micro_batch, h).num_classes
    for size in image_sizes[1:]:
        profiles.network(micro_batch, size)
    return profiles, probe, classes
