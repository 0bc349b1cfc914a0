"""Tests of ``launch/predict/``: ``poprun-ipu`` on presets, configurations, sweeps and ONNX files."""
