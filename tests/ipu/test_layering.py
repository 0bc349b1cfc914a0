"""The layers of ``ipu``: every subpackage has a rule for what it may import.

* the device model (``ipu/*.py``: specs, plan, precision, memory, io_tiles, compile) never imports
  the training runtime (``ipu/runtime/``) nor the cost model (``ipu/cost/``); only the command
  line (``ipu/cli.py``) sits above the cost model;
* ``ipu/pipeline/`` (split, schedule, timeline, the stages' execution) imports nothing of ``ipu``
  outside itself: the device model, the cost model and the runtime build on it;
* ``ipu/cost/`` imports the device model and the pipeline, never the runtime nor the command line;
* ``ipu/runtime/`` may import all of the above, never the command line;
* ``ipu/cost/`` keeps no registry: no module-level container starts empty, and no module of the
  project writes into one of its tables (what a plan needs, the plan carries).
"""

from pathlib import Path

from tests.import_rules import ROOT, PROJECT, module_containers, offenders_in, writes_to

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


def test_the_cost_model_keeps_no_mutable_registry():
    tables = {}
    for path in sorted((IPU / "cost").rglob("*.py")):
        for name, empty in module_containers(path).items():
            assert not empty, f"{path.relative_to(ROOT)}: {name} starts empty, a registry filled at run time"
            tables[name] = path
    writers = {}
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            mine = {n for n, p in tables.items() if p != path}  # a module may build its own table
            if found := writes_to(path, mine):
                writers[str(path.relative_to(ROOT))] = found
    assert writers == {}


def test_the_registry_rule_sees_a_registry(tmp_path):
    cost = tmp_path / "cost.py"
    cost.write_text("WORKLOADS: dict[str, int] = {}\nRUNS = {'a': 1}\n")
    assert module_containers(cost) == {"WORKLOADS": True, "RUNS": False}
    user = tmp_path / "user.py"
    user.write_text("from ipu.cost import layers\nfrom ipu.cost.x import RUNS\n"
                    "def f():\n    layers.WORKLOADS['a'] = 1\n    RUNS.update(b=2)\n")
    assert writes_to(user, {"WORKLOADS", "RUNS"}) == ["4: WORKLOADS", "5: RUNS"]
