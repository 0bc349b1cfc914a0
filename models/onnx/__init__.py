"""A user's own network from an ONNX file: one importer for prediction and training.

``graph.load_graph`` reads the file with the ``onnx`` package (parsing, checker and shape inference
only; no onnxruntime), folds constant subgraphs, fixes dynamic batch and image dimensions from the
options, and returns a framework-free ``Graph`` (the IR, ``ir.py``, which every other module reads):
nodes in topological order with their tensors' static shapes, attributes as plain Python and the
initializers as numpy arrays. An op outside ``SUPPORTED_OPS`` raises ``UnsupportedOpError`` before
anything else runs; other bad input raises a one-line ``OnnxImportError`` (both are ``ValueError``).

``profile.ProfiledGraph`` turns a graph into the ``LayerProfile`` rows the IPU memory and cost models
read, the same records the built-in models' ``Model.profile(batch_size)`` produce, grouped into named
blocks for pipeline splits. The graph-model trainer (``models.onnx.network``) builds the engine's layers from the same
``Graph``, and ``export.write_trained_onnx`` writes the file back with the trained weights.

Imports numpy, ``onnx`` and ``models.profile`` only: never the launcher, the device model, MPI or the
kernels.
"""

from models.onnx.graph import SUPPORTED_OPS, load_graph, read_model
from models.onnx.ir import NORM_OPS, Graph, Node, OnnxImportError, UnsupportedOpError, folded_norm_warning
from models.onnx.profile import ProfiledGraph, onnx_profile

__all__ = ["NORM_OPS", "SUPPORTED_OPS", "folded_norm_warning", "Graph", "Node", "OnnxImportError", "ProfiledGraph", "UnsupportedOpError", "load_graph",
           "onnx_profile", "read_model"]
