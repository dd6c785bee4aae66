"""Shorten `import quark.torch`: skip parsing transformers files that cannot hold what Quark looks for, and remember
what the files that can hold it hold.

At import, Quark 0.13 (`quark.torch.utils.llm.module_replacement.quark_experts`) runs
`_find_decorated_experts_classes`: it `ast.parse`s every transformers `models/**/modeling_*.py` (~540
files, ~10 s, half the import) to find classes decorated with `use_experts_implementation`, matched by
that name, then imports their modules. For calls made by that function only:
- a file whose text never names the decorator cannot hold such a class: `ast.parse` returns an empty module;
- a file that names it (67 of 538 in transformers 5.24, 3.5 MB) is parsed once per machine: the names of its
  decorated classes are cached by the file's sha256 (`CACHE_FILE` under `cache_dir()`), and later imports get
  a module holding just those classes, each with the decorator, which is all the scanner reads.
Every other caller of `ast.parse` is untouched. Quark builds the same registry, cached or not (a slow test
compares both with a plain import). `python -m eagle3_quant.quantize.quark_import --warm` (`make setup`) fills
the cache.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

DECORATOR = "use_experts_implementation"
SCANNER = "_find_decorated_experts_classes"
QUARK_SERIES = ("0", "13")
CACHE_FILE = "quark-expert-scan.json"      # {"sha256 of a modeling file": [its decorated class names]}

_real_parse = ast.parse
_lock = threading.Lock()
_users = 0
_cache: dict[str, list[str]] = {}
_cache_grew = False


def cache_dir() -> Path:
    """Where eagle3-quant keeps what it computes once per machine: $XDG_CACHE_HOME/eagle3-quant (~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eagle3-quant"


def _decorated(node: ast.stmt) -> bool:
    return isinstance(node, ast.ClassDef) and any(
        isinstance(d, ast.Name) and d.id == DECORATOR
        or isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == DECORATOR
        for d in node.decorator_list)


def _classes_module(names: list[str]) -> ast.Module:
    """What the scanner reads of a file: its decorated classes, by name, each with the decorator."""
    body = [ast.ClassDef(name=n, bases=[], keywords=[], body=[ast.Pass()], decorator_list=[ast.Name(id=DECORATOR)])
            for n in names]
    return ast.Module(body=body, type_ignores=[])


def _lean_parse(source, *args, **kwargs):
    global _cache_grew
    caller = sys._getframe(1).f_code
    if not (caller.co_name == SCANNER and "quark" in caller.co_filename and isinstance(source, str)):
        return _real_parse(source, *args, **kwargs)
    if DECORATOR not in source:
        return ast.Module(body=[], type_ignores=[])
    key = hashlib.sha256(source.encode()).hexdigest()
    names = _cache.get(key)
    if names is None:
        names = [node.name for node in _real_parse(source, *args, **kwargs).body if _decorated(node)]
        with _lock:
            _cache[key], _cache_grew = names, True
    return _classes_module(names)


def _applies() -> bool:
    try:
        return tuple(metadata.version("amd-quark").split(".")[:2]) == QUARK_SERIES
    except metadata.PackageNotFoundError:
        return False


def _load_cache() -> None:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return
    if isinstance(data, dict):
        _cache.update({k: v for k, v in data.items() if isinstance(v, list) and all(isinstance(n, str) for n in v)})


def _save_cache() -> None:
    """Atomically (temp file, rename); a cache that cannot be written is simply not kept."""
    global _cache_grew
    folder = cache_dir()
    tmp = folder / f".{CACHE_FILE}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(_cache, sort_keys=True, allow_nan=False))
        tmp.replace(folder / CACHE_FILE)
        _cache_grew = False
    except OSError:
        tmp.unlink(missing_ok=True)


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
            _load_cache()
            ast.parse = _lean_parse
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                ast.parse = _real_parse
                if _cache_grew:
                    _save_cache()
