"""A user's own network from an ONNX file: one importer for prediction and training, and the export back.

``source.OnnxFile`` reads the file once per process; ``graph.load_graph`` turns it (with the ``onnx``
package: parsing, checker and shape inference only; no onnxruntime) into a framework-free ``Graph`` (the
IR, ``ir.py``, which every other module reads): constant subgraphs folded, dynamic batch and image
dimensions fixed from the options, nodes in topological order with their tensors' static shapes,
attributes as plain Python and the initializers as numpy arrays. An op outside ``SUPPORTED_OPS`` raises
``UnsupportedOpError`` before anything else runs; other bad input raises a one-line ``OnnxImportError``
(both are ``ValueError``). Every op the package reads has one row in ``op_table.py``: how the profile
counts it, which engine layer trains it, or that only prediction takes it.

``profile.ProfiledGraph`` turns a graph into the ``LayerProfile`` rows the IPU memory and cost models
read, the same records the built-in models' ``Model.profile(batch_size)`` produce, grouped into named
blocks for pipeline splits; ``profile.cost_workload`` is what those rows do not say (the activation and
norm). The graph-model trainer (``network.py``) builds the engine's layers from the same ``Graph``, and
``export.write_trained_onnx`` writes the file back with the trained weights. What prediction and training
take from a file (checked against the options or the dataset) is ``source.py``'s.

Imports numpy, ``onnx`` and ``models`` only: never the launcher, the device model, MPI or the kernels.
"""

from models.onnx.graph import SUPPORTED_OPS, load_graph, read_model
from models.onnx.ir import Graph, Node, OnnxImportError, UnsupportedOpError, folded_norm_warning
from models.onnx.op_table import NORM_OPS
from models.onnx.profile import ProfiledGraph, cost_workload, onnx_profile
from models.onnx.source import OnnxFile, OnnxProfiles, open_for_prediction, training_graph

__all__ = ["NORM_OPS", "SUPPORTED_OPS", "folded_norm_warning", "Graph", "Node", "OnnxFile", "OnnxImportError",
           "OnnxProfiles", "ProfiledGraph", "UnsupportedOpError", "cost_workload", "load_graph", "onnx_profile",
           "open_for_prediction", "read_model", "training_graph"]
