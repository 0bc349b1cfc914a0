"""poplibs' own benchmark table: full-program cycles of single layers on Graphcore's IPU Model.

poplibs kept a regression table of its benchmarks, ``tests/benchmark_results.csv``, until commit
``3a650a11`` (2021-03-16) deleted it; ``tests/CMakeLists.txt`` at the same commit gives each
benchmark's command. ``poplibs_benchmarks.csv`` beside this file stores the rows of the three tools
whose layers the cost model expresses, with that command's flags:

* ``single_conv_layer`` (``add_conv_benchmark``): one convolution trained for one step, the forward
  pass, then the input gradient, the weight gradient and the weight update (``scaledAddTo``), half
  inputs, float partials, available memory 0.6, no bias (``--bias 0``); ResNet-50, Inception-v3,
  VGG-16, AlexNet and MobileNet layers at batch 4 (MobileNet's depthwise layers among them);
* ``fully_connected_layer`` (``add_fc_benchmark``): the same three passes of a matrix product, with a
  bias (the tool's default), half unless ``--data-type`` says otherwise;
* ``reduce_op`` (``add_reduction_benchmark``): one reduction, among them ResNet-50's group-norm
  statistics (``resnet50_tr_bs1_*_reduce``) and BERT's.

``Cycles`` is the IPU Model's simulated count of the whole program (``executionProfile.simulation.cycles``
in ``tools/bench.py``), on all tiles of the chip (IpuModel1: the Mk1 GC2's 1,216 tiles, IpuModel2: the
Mk2 GC200's 1,472) unless ``--tiles-per-ipu`` says otherwise. The IPU Model is Graphcore's simulator,
not hardware: its counts include Poplar's exchange, copies and rearrangements as the Model costs them.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path

SOURCE = ("graphcore/poplibs tests/benchmark_results.csv and tests/CMakeLists.txt at the parent of commit 3a650a11 "
          "(2021-03-16); IPU Model cycles of the whole program")
ROWS_FILE = Path(__file__).with_name("poplibs_benchmarks.csv")
CHIP_OF_TARGET = {"IpuModel1": "mk1", "IpuModel2": "mk2"}
_FLAG = re.compile(r"--([a-z-]+)[ =](\{[^}]*\}|\S+)")


@dataclass(frozen=True)
class Benchmark:
    """One benchmark on one IPU Model target: its tool, its flags and the table's cycles."""

    target: str  # "IpuModel1" or "IpuModel2"
    name: str
    tool: str  # "single_conv_layer", "fully_connected_layer" or "reduce_op"
    cycles: int
    flags: tuple[tuple[str, str], ...]  # (flag, value) in the command's order

    @property
    def chip(self) -> str:
        return CHIP_OF_TARGET[self.target]

    def flag(self, name: str, default=None):
        """A flag's value: an int, a tuple of ints for ``{a,b}`` or a comma list, else the string."""
        for key, value in self.flags:
            if key == name:
                return _value(value)
        return default


def _value(text: str):
    body = text.strip("{}")
    parts = body.split(",")
    if all(re.fullmatch(r"-?\d+", p) for p in parts):
        numbers = tuple(int(p) for p in parts)
        return numbers if text.startswith("{") or len(numbers) > 1 else numbers[0]
    return text


def parse_flags(text: str) -> tuple[tuple[str, str], ...]:
    """``--field {56,56} --kernel-size 3 --type=half`` as ((flag, value), ...)."""
    return tuple(_FLAG.findall(text))


@functools.cache
def benchmarks() -> tuple[Benchmark, ...]:
    """Every stored row (read once)."""
    with ROWS_FILE.open(newline="") as f:
        lines = [line for line in f if not line.startswith("#")]
    return tuple(Benchmark(r["target"], r["name"], r["tool"], int(r["cycles"]), parse_flags(r["flags"]))
                 for r in csv.DictReader(lines))
