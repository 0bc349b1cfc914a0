"""The ``onnx`` package and the submodules this package reads, imported at their first use.

Importing ``onnx`` costs most of a second (its ``ml_dtypes`` extension: 0.8 s of CPU on an AMD EPYC
Zen 3); ``launch.train`` and ``launch.predict`` import ``models.onnx`` for the runs that name a file, so
every other run, and every process of a job, would pay it at start. Here each name stands for its
module and imports it when an attribute is first read (``onnx.ModelProto``, ``numpy_helper.to_array``).
"""

from __future__ import annotations

import importlib


class _Module:
    """A module, imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported at first use>"


onnx = _Module("onnx")
helper = _Module("onnx.helper")
numpy_helper = _Module("onnx.numpy_helper")
shape_inference = _Module("onnx.shape_inference")

__all__ = ["helper", "numpy_helper", "onnx", "shape_inference"]
