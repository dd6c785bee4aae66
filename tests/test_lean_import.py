"""`import_quark` skips parsing transformers files that cannot hold a decorated experts class; same result."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from eagle3_quant.quantize import lean_expert_scan as lean

WITH = "@use_experts_implementation\nclass A:\n    pass\n"
WITHOUT = "class B:\n    pass\n"


def _quark_style_scanner():
    """A function with Quark's scanner name, compiled as if it lived in quark/, calling ast.parse like it."""
    namespace = {"ast": ast}
    code = "def _find_decorated_experts_classes(text):\n    return ast.parse(text)\n"
    exec(compile(code, "/site-packages/quark/torch/fake.py", "exec"), namespace)
    return namespace["_find_decorated_experts_classes"]


def test_only_quarks_scanner_gets_empty_modules_and_only_inside_the_context():
    scan = _quark_style_scanner()
    original = ast.parse
    with lean.lean_expert_scan():
        assert scan(WITHOUT).body == []
        assert [node.name for node in scan(WITH).body] == ["A"]
        assert [node.name for node in ast.parse(WITHOUT).body] == ["B"]      # any other caller: untouched
        with lean.lean_expert_scan():                                       # nested (a second thread)
            assert scan(WITHOUT).body == []
        assert scan(WITHOUT).body == []
    assert ast.parse is original
    assert [node.name for node in scan(WITHOUT).body] == ["B"]


REGISTRY = ("from quark.torch.utils.llm.module_replacement import quark_experts as q; import ast; "
            "from eagle3_quant.quantize import lean_expert_scan as lean; "
            "print(ast.parse is lean._real_parse, sorted(f'{k.__module__}.{k.__qualname__}:{v.__name__}' "
            "for k, v in q.PREPROCESS_REGISTRY.items()))")


@pytest.mark.slow
def test_quark_builds_the_same_experts_registry_as_a_plain_import(tmp_path):
    def registry(first: str) -> str:
        return subprocess.run([sys.executable, "-c", f"{first}; {REGISTRY}"], capture_output=True, text=True,
                              check=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)}).stdout.strip()

    plain = registry("import quark.torch")
    ours = registry("from eagle3_quant.quantize.quark_import import import_quark; import_quark()")   # fills the cache
    assert (tmp_path / "eagle3-quant" / lean.CACHE_FILE).is_file()
    cached = registry("from eagle3_quant.quantize.quark_import import import_quark; import_quark()")
    assert ours == cached == plain and plain.startswith("True [") and "QuarkExperts" in plain


def test_the_files_that_name_the_decorator_are_parsed_once_per_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(lean, "_cache", {})
    scan = _quark_style_scanner()
    nested = "@use_experts_implementation(a=1)\nclass C:\n    pass\n\nclass D:\n    pass\n" + WITH
    with lean.lean_expert_scan():
        first = scan(nested)
    assert [(n.name, n.decorator_list[0].id) for n in first.body] == [("C", lean.DECORATOR), ("A", lean.DECORATOR)]
    cached = json.loads((tmp_path / "eagle3-quant" / lean.CACHE_FILE).read_text())
    assert list(cached.values()) == [["C", "A"]]
    monkeypatch.setattr(lean, "_cache", {})                   # a new process: the cache is read from the file
    real, parsed = ast.parse, []
    monkeypatch.setattr(ast, "parse", real)                   # restored after the test, whatever happens
    monkeypatch.setattr(lean, "_real_parse", lambda text, *a, **k: parsed.append(text) or real(text, *a, **k))
    with lean.lean_expert_scan():
        again = scan(nested)
    assert [n.name for n in again.body] == ["C", "A"] and parsed == []
