"""One op table (``models.onnx.op_table``): every list of ONNX ops, every message naming them, the trainer's and
the profile's dispatch and the table of ``docs/onnx.md`` come from it, and no module spells a list of its own."""

import ast
from pathlib import Path

import pytest

from models.onnx import SUPPORTED_OPS
from models.onnx.graph import CONSTANT_OPS
from models.onnx.network import TRAINABLE_OPS, _Builder
from models.onnx.op_table import DROP_PATH_PARTS, OPS, PROFILE_RULES, RULES, markdown_table
from tests.import_rules import ROOT

NAMES = set(OPS) | set(DROP_PATH_PARTS)


def test_docs_onnx_md_holds_the_table_and_the_folded_ops():
    text = (ROOT / "docs" / "onnx.md").read_text()
    assert markdown_table() in text, "regenerate docs/onnx.md's table: models.onnx.op_table.markdown_table()"
    assert ", ".join(f"`{o}`" for o in sorted(CONSTANT_OPS)) in text


def test_every_row_has_a_profile_rule_and_every_trainable_one_a_builder():
    assert {r.family for r in RULES} == set(PROFILE_RULES)
    assert {r.layer for r in RULES if r.trainable} == set(_Builder.BUILDERS)
    assert all(callable(getattr(_Builder, method)) for method in _Builder.BUILDERS.values())


def test_the_supported_list_and_the_messages_come_from_the_table():
    assert {r.op for r in RULES if r.onnx} | set(DROP_PATH_PARTS) <= set(SUPPORTED_OPS)
    assert not {"SiLU", "DropPath"} & set(SUPPORTED_OPS)  # patterns, not ONNX ops
    trains = [r.op for r in RULES if r.trainable]
    assert [part.split(" (")[0] for part in TRAINABLE_OPS.split(", ") if part[:1].isupper()] == trains
    assert {"Gelu", "Softmax", "LayerNormalization", "MatMul", "AveragePool"} <= set(trains)


def _op_lists(path: Path) -> list[str]:
    """Literal tuples, lists and sets of three or more op names in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(names) >= 3 and len(names) == len(node.elts) and set(names) <= NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@pytest.mark.parametrize("package", ["models", "ipu", "launch", "data"])
def test_no_module_spells_an_op_list_of_its_own(package):
    paths = [p for p in (ROOT / package).rglob("*.py") if p.name != "op_table.py"]
    assert [hit for p in paths for hit in _op_lists(p)] == []


def test_the_op_list_check_sees_a_list():
    path = ROOT / "models" / "onnx" / "op_table.py"
    assert _op_lists(path), "op_table.py itself spells its lists"
