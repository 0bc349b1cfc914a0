"""Tests of ``ipu/pipeline/``: stage splits, schedules, their timeline and execution."""
