"""The run record's kernel choices: instance 0's, and whether every instance took the same."""

from __future__ import annotations

import logging

import numpy as np

from launch.train.kernel_record import gather_kernel_record
from models.kernels import wisdom
from poprun_py.comm import LoopbackComm


class TwoInstances:
    """allgather as on two instances, the other one's digest given."""

    def __init__(self, other: np.ndarray | None):
        self.other = other

    def allgather(self, array):
        return np.stack([array, array if self.other is None else self.other])


def test_the_record_names_the_choices_and_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("POPRUN_WISDOM", str(tmp_path / "w.json"))
    monkeypatch.setattr(wisdom, "_used", {"k 1 a/b": {"choice": "b", "ms": {"a": 2.0, "b": 1.0}}})
    record = gather_kernel_record(LoopbackComm())
    assert record == {"file": str(tmp_path / "w.json"), "machine": wisdom.machine(), "choices": {"k 1 a/b": "b"},
                      "instances_agree": True}


def test_instances_that_chose_differently_are_told_how_to_share_one_file(monkeypatch, caplog):
    monkeypatch.setattr(wisdom, "_used", {"k 1 a/b": {"choice": "b", "ms": {}}})
    assert gather_kernel_record(TwoInstances(None))["instances_agree"]
    with caplog.at_level(logging.WARNING):
        record = gather_kernel_record(TwoInstances(np.zeros(8, np.uint8)))
    assert not record["instances_agree"] and "POPRUN_WISDOM" in caplog.text


def test_without_wisdom_the_record_says_so(monkeypatch):  # (the tests run with POPRUN_WISDOM=off)
    monkeypatch.setattr(wisdom, "_used", {})
    assert gather_kernel_record(LoopbackComm()) == {"file": None, "machine": None, "choices": {},
                                                     "instances_agree": True}
