"""Nothing from a draft is ever executed: no unpickling by default, no remote code, no eval/exec.

Scans the syntax tree of every module the package ships (and the benchmarks), so a new call cannot slip in.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNPICKLERS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("dill", "load"),
              ("dill", "loads"), ("joblib", "load"), ("cloudpickle", "load"), ("cloudpickle", "loads"),
              ("numpy", "load"), ("np", "load")}


def shipped_sources() -> list[Path]:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    folders = {ROOT / folder for folder in mapping.values()} | {ROOT / "benchmarks", ROOT / "fixtures"}
    assert all(folder.is_dir() for folder in folders), sorted(str(f) for f in folders if not f.is_dir())
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return "?"


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name, where = dotted(node.func), f"{path.relative_to(ROOT)}:{node.lineno}"
        if name.endswith("torch.load"):
            flag = keyword(node, "weights_only")
            if not (isinstance(flag, ast.Constant) and flag.value is True):
                found.append(f"{where}: {name}() without weights_only=True")
        if tuple(name.rsplit(".", 1)[-2:]) in UNPICKLERS and "allow_pickle" not in {k.arg for k in node.keywords}:
            found.append(f"{where}: {name}() unpickles")
        if name in ("eval", "exec", "compile", "__import__"):
            found.append(f"{where}: {name}()")
        remote = keyword(node, "trust_remote_code")   # allowed: False, or a value the user passed in
        if remote is not None and not isinstance(remote, ast.Name | ast.Attribute) \
                and not (isinstance(remote, ast.Constant) and remote.value is False):
            found.append(f"{where}: trust_remote_code={ast.unparse(remote)}")
    return found


def test_the_scan_sees_the_package():
    names = {str(p.relative_to(ROOT)) for p in shipped_sources()}
    assert {"eagle3_quant/reading/pickle_source.py", "quantize/api.py", "eagle3_quant/reading/checkpoint.py"} <= names


@pytest.mark.parametrize("snippet, problem", [
    ("import torch\ntorch.load(f)", "without weights_only=True"),
    ("import torch\ntorch.load(f, weights_only=False)", "without weights_only=True"),
    ("import pickle\npickle.loads(b)", "unpickles"),
    ("AutoModel.from_pretrained(p, trust_remote_code=True)", "trust_remote_code=True"),
    ("AutoConfig.from_pretrained(p, trust_remote_code=1)", "trust_remote_code=1"),
    ("AutoTokenizer.from_pretrained(p, trust_remote_code=not safe)", "trust_remote_code=not safe"),
    ("eval(text)", "eval()"),
])
def test_the_scan_catches_each_kind(tmp_path, monkeypatch, snippet, problem):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = tmp_path / "probe.py"
    bad.write_text(snippet + "\n")
    assert any(problem in v for v in violations(bad)), violations(bad)


def test_no_unpickling_no_remote_code_no_eval_in_shipped_code():
    found = [v for path in shipped_sources() for v in violations(path)]
    assert found == []


# Every torch.load is reviewed: each of these reads tensors only (weights_only=True, checked above).
TORCH_LOAD_ALLOWED = {
    "eagle3_quant/reading/pickle_source.py": "pickle draft weights, only with --allow-pickle",
    "calib/specforge.py": "SpecForge hidden-state dumps the user imports",
    "fixtures/real_pair/train.py": "the training checkpoint it wrote itself (tensors, numbers, lists)",
}


def test_every_torch_load_is_a_reviewed_one():
    calls = {str(p.relative_to(ROOT)) for p in shipped_sources() for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Call) and dotted(node.func).endswith("torch.load")}
    assert calls <= set(TORCH_LOAD_ALLOWED), sorted(calls - set(TORCH_LOAD_ALLOWED))
    assert "eagle3_quant/reading/pickle_source.py" in calls
