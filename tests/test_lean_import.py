"""`import_quark` skips parsing transformers files that cannot hold a decorated experts class; same result."""

from __future__ import annotations

import ast
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
def test_quark_builds_the_same_experts_registry_as_a_plain_import():
    def registry(first: str) -> str:
        return subprocess.run([sys.executable, "-c", f"{first}; {REGISTRY}"], capture_output=True, text=True,
                              check=True, env={**os.environ, "QUARK_LOG_LEVEL": "error"}).stdout.strip()

    plain = registry("import quark.torch")
    ours = registry("from eagle3_quant.quantize.quark_import import import_quark; import_quark()")
    assert ours == plain and plain.startswith("True [") and "QuarkExperts" in plain
