"""``run_dir/model.onnx``: the user's graph (``model.onnx``) with the trained initializers.

It starts from the file as the run read it (``source.OnnxFile``: read once, not again at the end).

Every parameter goes back through its ``ParamSite.to_onnx`` (the graph's layout), every batch norm's
running statistics by their initializer names; an initializer the importer reached through an
``Identity``/``Unsqueeze``/``Squeeze``/``Reshape`` of a constant is written to the initializer it came
from, in that initializer's shape. The running statistics are the first replica's (every replica keeps its
own, as torch's DistributedDataParallel without SyncBatchNorm; the model holds whichever replica ran last on
its instance, which would make the file depend on the instance split). A classifier that
``model.num_classes`` replaced is written in its new shape, and the graph's logits output with its class count. The rest of the graph is the file's own. Written atomically
(a temporary file, then ``os.replace``). In PyTorch::

    sd = {i.name: torch.from_numpy(onnx.numpy_helper.to_array(i).copy()) for i in onnx.load(p).graph.initializer}
    net.load_state_dict({k: v for k, v in sd.items() if k in net.state_dict()}, strict=False)
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np
from models.onnx.lazy_onnx import numpy_helper, onnx

from models.onnx.graph import read_model
from models.onnx.op_table import RESHAPES
from models.onnx.source import OnnxFile

logger = logging.getLogger(__name__)


def trained_onnx(model, source: OnnxFile, buffers=None, num_classes: int | None = None):
    """The ``onnx.ModelProto`` of ``source`` (the file of ``model.onnx``) with ``model``'s weights and
    ``buffers`` (norm running statistics; default ``model.buffers()``); ``num_classes``: ``model.num_classes``."""
    proto = read_model(source.proto)  # a copy
    inits = {t.name: t for t in proto.graph.initializer}
    origin = {n.output[0]: n.input[0] for n in proto.graph.node if n.op_type in RESHAPES and n.input}
    values = {s.initializer: s.to_onnx(np.asarray(s.param.data)) for s in model.sites}
    values.update(model.buffers() if buffers is None else buffers)
    missing, resized = [], []
    for name, value in values.items():
        root = name
        while root not in inits and root in origin:
            root = origin[root]
        if root not in inits:
            missing.append(name)
            continue
        old = inits[root]
        dtype = numpy_helper.to_array(old).dtype
        value = np.asarray(value, dtype=dtype)
        if value.size != math.prod(old.dims) and root == name:  # model.num_classes replaced the classifier
            resized.append(name)
        else:
            value = value.reshape(tuple(old.dims))
        old.CopyFrom(numpy_helper.from_array(value, root))
    if resized:  # the logits' class count is the new classifier's; stale inferred shapes go
        if num_classes is None:
            raise ValueError(f"{resized} of {source.shown} changed shape: give the class count (model.num_classes)")
        classes = int(num_classes)
        for out in proto.graph.output:
            dims = out.type.tensor_type.shape.dim
            if len(dims) == 2:
                dims[1].ClearField("dim_param")
                dims[1].dim_value = classes
        del proto.graph.value_info[:]
    if missing:
        raise ValueError(f"cannot write the trained weights back to the graph of {source.shown}: no initializer "
                         f"holds {missing[:5]}")
    return proto


def write_trained_onnx(model, source: OnnxFile, run_dir, buffers=None, num_classes: int | None = None) -> Path:
    """``run_dir/model.onnx``, atomically; returns its path."""
    out = Path(run_dir) / "model.onnx"
    tmp = out.with_name(f".model.onnx.{os.getpid()}.tmp")
    onnx.save(trained_onnx(model, source, buffers, num_classes), str(tmp))
    os.replace(tmp, out)
    logger.info("Trained weights in %s (the graph of %s with new initializers).", out, source.given)
    return out
