"""Halve `import quark.torch`: skip parsing transformers files that cannot hold what Quark looks for.

At import, Quark 0.13 (`quark.torch.utils.llm.module_replacement.quark_experts`) runs
`_find_decorated_experts_classes`: it `ast.parse`s every transformers `models/**/modeling_*.py` (~540
files, ~10 s, half the import) to find classes decorated with `use_experts_implementation`, matched by
that name. A file whose text never names the decorator cannot hold such a class, so for those files, and
only for calls made by that function, `ast.parse` returns an empty module; every other file is parsed as
usual. Quark builds the same registry (a slow test compares it with a plain import).
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata

DECORATOR = "use_experts_implementation"
SCANNER = "_find_decorated_experts_classes"
QUARK_SERIES = ("0", "13")

_real_parse = ast.parse
_lock = threading.Lock()
_users = 0


def _lean_parse(source, *args, **kwargs):
    caller = sys._getframe(1).f_code
    if (caller.co_name == SCANNER and "quark" in caller.co_filename and isinstance(source, str)
            and DECORATOR not in source):
        return ast.Module(body=[], type_ignores=[])
    return _real_parse(source, *args, **kwargs)


def _applies() -> bool:
    try:
        return tuple(metadata.version("amd-quark").split(".")[:2]) == QUARK_SERIES
    except metadata.PackageNotFoundError:
        return False


@contextmanager
def lean_expert_scan() -> Iterator[None]:
    """Install the lean `ast.parse` for the duration of an import of quark.torch (any thread, nestable)."""
    global _users
    if not _applies():
        yield
        return
    with _lock:
        _users += 1
        if _users == 1:
            ast.parse = _lean_parse
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                ast.parse = _real_parse
