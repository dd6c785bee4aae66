"""One owner of the manifest: its file name is spelled in `records/manifest.py` only, and every module reads it
through `Manifest.read` (issue 23: the name was spelled in four modules, one read it by raw key)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWNER = ROOT / "eagle3_quant" / "records" / "manifest.py"
SHIPPED = ("eagle3_quant", "calib", "quantize", "validate", "export", "fixtures", "benchmarks")


def _strings_outside_docstrings(tree: ast.AST) -> list[ast.Constant]:
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            docstrings.add(id(node.body[0].value))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_only_the_manifest_module_spells_its_file_name():
    spelled = []
    for folder in SHIPPED:
        for path in (ROOT / folder).rglob("*.py"):
            if path == OWNER:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            spelled += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in _strings_outside_docstrings(tree)
                        if "eagle3_quant.json" in n.value]
    assert spelled == []
    assert not (ROOT / "eagle3_quant" / "records" / "manifest_check.py").exists()      # folded into manifest.py
