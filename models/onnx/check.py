"""What stops a user's ONNX file from predicting and from training, every blocker at once (``poprun-ipu check``).

Nothing here knows an op: the importer (``graph.load_graph``: ops outside the op table, constant-only ops whose
value is computed, random ops outside stochastic depth), the profile (``profile.ProfiledGraph``: an output that
is not the logits of one image batch; ``blocks.split_starts``: the pipeline splits) and the trainer (``network.graph_model``: an op without
a layer, an attribute its layer does not take, shared weights, pipeline splits) each gather their blockers into
one error (``OnnxImportError.blockers``), and :func:`check_file` reads them back one line per op, reason and
fix (``ir.blocker_lines``). Prediction's blockers stop training too; training is checked past them only once
the graph imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from models.onnx.blocks import split_starts
from models.onnx.ir import OnnxImportError, blocker_lines, folded_norm_warning
from models.onnx.profile import ProfiledGraph
from models.onnx.source import OnnxFile

CHECK_BATCH = 2  # the batch where the graph leaves it dynamic (blockers do not depend on it; batch norm needs 2)
CHECK_IMAGE_SIZE = 224  # the image size where the graph leaves it dynamic and --image-size is not given


@dataclass
class Verdict:
    """One use of the file (``predict`` or ``train``): one line per blocker, empty when it runs."""

    use: str
    lines: list[str] = field(default_factory=list)
    note: str = ""  # why the list may not be complete

    @property
    def clean(self) -> bool:
        return not self.lines


@dataclass
class CheckReport:
    """What ``poprun-ipu check`` prints: the graph's input shape as checked, notes, and one verdict per use."""

    shown: str
    input_shape: tuple[int, ...] | None
    predict: Verdict
    train: Verdict
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.predict.clean and self.train.clean

    def lines(self) -> list[str]:
        shape = "x".join(map(str, self.input_shape)) if self.input_shape else "(not imported)"
        out = [f"{self.shown}: input {shape}", *(f"note: {n}" for n in self.notes)]
        for v in (self.predict, self.train):
            count = len(v.lines)
            head = "ok" if v.clean else f"{count} blocker{'s' if count > 1 else ''}"
            out.append(f"{v.use}: {head}{f' ({v.note})' if v.note else ''}")
            out += [f"  {line}" for line in v.lines]
        return out


def _lines(err: OnnxImportError, shown: str) -> list[str]:
    """The blockers of an error one a line, or the error itself (without the file's name) when it names none."""
    if err.blockers:
        return blocker_lines(err.blockers)
    text = str(err)
    return [text[len(shown) + 2:] if text.startswith(f"{shown}: ") else text]


def check_file(file: OnnxFile, image_size: int | None = None, splits: Sequence[str] = ()) -> CheckReport:
    """Every blocker of ``file`` for prediction and for training, at ``image_size`` (default: the graph's own, else
    ``CHECK_IMAGE_SIZE``); ``splits``: pipeline splits, checked as ``--pipeline-splits`` and ``ipu.pipeline_splits``
    take them (``blocks.split_starts``). Bad input that is no blocker (an unreadable file, an input that is not an image batch)
    raises its ``OnnxImportError`` as prediction and training do."""
    from models.onnx.network import graph_model

    notes = []
    size = image_size
    if size is None and file.fixed_hw() is None:
        size = CHECK_IMAGE_SIZE
        notes.append(f"the graph's image size is dynamic: checked at {size}x{size} (--image-size N for another)")
    predict, train = Verdict("predict"), Verdict("train")
    try:
        graph = file.graph(size, CHECK_BATCH)
    except OnnxImportError as err:
        if not err.blockers:
            raise
        predict.lines = train.lines = _lines(err, file.given)
        train.note = "the importer's; the trainer is checked once the graph imports"
        return CheckReport(file.given, None, predict, train, notes)
    warning = folded_norm_warning(graph, file.given, "prediction leaves out the norms' cost and training has no norm")
    if warning:
        notes.append(warning[len(file.given) + 2:])
    try:
        ProfiledGraph(graph, "prefix", name=file.given)
        if splits:
            split_starts(graph, splits, file.given, "--pipeline-splits")
    except OnnxImportError as err:
        predict.lines = _lines(err, file.given)
    try:
        graph_model(graph, splits=splits, shown=file.given)
    except OnnxImportError as err:
        train.lines = _lines(err, file.given)
    return CheckReport(file.given, graph.input_shape, predict, train, notes)
