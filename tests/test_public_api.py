"""The public API: every name of the lazy table `eagle3_quant._LAZY` resolves, and the package's `if TYPE_CHECKING:`
block, which lets editors and type checkers see those names, imports exactly the same names from the same modules."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import eagle3_quant

INIT = eagle3_quant.__file__


def type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports in `eagle3_quant/__init__.py`'s `if TYPE_CHECKING:` block."""
    with open(INIT) as f:
        tree = ast.parse(f.read())
    blocks = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert len(blocks) == 1, "eagle3_quant/__init__.py needs one `if TYPE_CHECKING:` block"
    found: dict[str, str] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom) and not node.level, ast.unparse(node)
        for alias in node.names:
            assert alias.asname is None and alias.name not in found, ast.unparse(node)
            found[alias.name] = node.module
    return found


def test_the_type_checking_block_imports_the_lazy_table():
    assert type_checking_imports() == eagle3_quant._LAZY
    assert eagle3_quant.__all__ == sorted(eagle3_quant._LAZY)


def test_every_public_name_resolves():
    for name, module in eagle3_quant._LAZY.items():
        assert getattr(eagle3_quant, name) is getattr(importlib.import_module(module), name), name
    assert {"bench_draft", "Eagle3Draft", "SCHEMES"} <= set(eagle3_quant._LAZY)


def test_an_unknown_name_is_an_attribute_error():
    assert not hasattr(eagle3_quant, "no_such_function")


def test_importing_the_package_imports_none_of_the_public_modules():
    code = ("import sys, eagle3_quant;"
            "print(sorted(m for m in set(eagle3_quant._LAZY.values()) | {'torch'} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
