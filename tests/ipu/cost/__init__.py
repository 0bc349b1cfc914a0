"""Tests of ``ipu/cost/``: vertices, convolution plans, layers, collectives, the prediction against
published figures, its sensitivity and validation."""
