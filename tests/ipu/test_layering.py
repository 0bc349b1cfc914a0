"""The layers of ``ipu``: every subpackage has a rule for what it may import.

* the device model (``ipu/*.py``: specs, plan, precision, memory, io_tiles, compile) never imports
  the training runtime (``ipu/runtime/``) nor the cost model (``ipu/cost/``); only the command
  line (``ipu/cli.py``) sits above the cost model;
* ``ipu/pipeline/`` (split, schedule, timeline, the stages' execution) imports nothing of ``ipu``
  outside itself: the device model, the cost model and the runtime build on it;
* ``ipu/cost/`` imports the device model and the pipeline, never the runtime nor the command line;
* ``ipu/runtime/`` may import all of the above, never the command line.
"""

from pathlib import Path

from tests.import_rules import offenders_in

IPU = Path(__file__).resolve().parents[2] / "ipu"

# subpackage -> prefixes of ``ipu`` modules it must not import ("" = the package's own top level)
RULES = {
    "pipeline": lambda m: m.startswith("ipu.") and not m.startswith("ipu.pipeline"),
    "cost": lambda m: m.startswith(("ipu.runtime", "ipu.cli")),
    "runtime": lambda m: m.startswith("ipu.cli"),
}


def _offenders(paths, forbidden) -> dict[str, list[str]]:
    return offenders_in(paths, forbidden)


def test_every_subpackage_has_a_rule():
    subpackages = {p.parent.name for p in IPU.glob("*/__init__.py")}
    assert subpackages == set(RULES)


def test_device_model_does_not_import_the_runtime_nor_the_cost_model():
    top = [p for p in IPU.glob("*.py") if p.name != "cli.py"]
    assert _offenders(top, lambda m: m.startswith(("ipu.runtime", "ipu.cost"))) == {}
    assert _offenders([IPU / "cli.py"], lambda m: m.startswith("ipu.runtime")) == {}


def test_each_subpackage_keeps_its_rule():
    for name, forbidden in RULES.items():
        assert _offenders(sorted((IPU / name).rglob("*.py")), forbidden) == {}, name


def test_runtime_package_exists_with_the_training_modules():
    names = {p.stem for p in (IPU / "runtime").glob("*.py")}
    assert {"engine", "replica", "emulation", "streams", "normalise", "mixing"} <= names
    assert {"split", "schedule", "timeline", "execution"} <= {p.stem for p in (IPU / "pipeline").glob("*.py")}
