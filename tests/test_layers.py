"""The package's layers run one way: core <- calib <- quantize <- validate <- bench <- export <- CLI / pipeline.

The engines wing (`eagle3_quant/engines/`) is part of the core: its children run in an engine's interpreter and
import only the core, never a stage. Every module that imports vLLM or SGLang lives in that wing.

Builds the import graph of the installed package from its source (every `import`, lazy ones inside functions
included, and `from eagle3_quant import NAME` resolved through the lazy public table) and fails on an import
that runs upward. Modules of one group may import each other, but the imports that run (not those under
`if TYPE_CHECKING:`) form no circle.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANKS = {"core": 0, "calib": 1, "quantize": 2, "validate": 3, "bench": 4, "export": 5, "top": 6}
TOP = ("eagle3_quant.cli", "eagle3_quant.pipeline", "eagle3_quant.pipeline_spec")


def group(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("calib", "quantize", "validate", "export"):
        return parts[1]
    if module == "eagle3_quant.bench" or module.startswith("eagle3_quant.bench."):
        return "bench"
    if module.startswith(TOP):
        return "top"
    return "core"


def modules() -> dict[str, Path]:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in mapping.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            found[".".join([package, *(p for p in parts if p != "__init__")])] = path
    return found


def lazy_table() -> dict[str, str]:
    tree = ast.parse((ROOT / "eagle3_quant" / "__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_LAZY":
            return ast.literal_eval(node.value)
    raise AssertionError("eagle3_quant/__init__.py has no _LAZY table")


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` but the bodies of `if TYPE_CHECKING:` (imports for annotations, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            todo += child.orelse if is_type_checking(child) else [child]


def imports(path: Path, lazy: dict[str, str], known: frozenset[str] = frozenset(),
            runtime_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every package import in `path`; `from PKG import MOD` names PKG.MOD when it is in `known`."""
    found = []
    tree = ast.parse(path.read_text())
    for node in runtime_nodes(tree) if runtime_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("eagle3_quant")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("eagle3_quant"):
            if node.module == "eagle3_quant":
                found += [(node.lineno, lazy.get(a.name, f"eagle3_quant.{a.name}")) for a in node.names]
            else:
                named = (f"{node.module}.{a.name}" for a in node.names)
                found += [(node.lineno, t) for t in dict.fromkeys(n if n in known else node.module for n in named)]
    return found


def upward_imports(mods: dict[str, Path], lazy: dict[str, str]) -> list[str]:
    bad = []
    for name, path in sorted(mods.items()):
        if name == "eagle3_quant":
            continue       # the lazy public table: strings, resolved on first use
        for line, target in imports(path, lazy):
            if RANKS[group(target)] > RANKS[group(name)]:
                bad.append(f"{path.name}:{line}: {group(name)} imports {group(target)} ({target})")
    return bad


def test_no_import_runs_upward():
    assert upward_imports(modules(), lazy_table()) == []


def test_the_graph_sees_every_group_and_lazy_imports():
    mods, lazy = modules(), lazy_table()
    assert {group(m) for m in mods} == set(RANKS)
    assert {"eagle3_quant.cli.app", "eagle3_quant.runtime.model", "eagle3_quant.reading.draft"} <= set(mods)
    # a lazy import inside a function counts: quantize_draft's auto-exclude imports sensitivity in a function
    assert (any(t == "eagle3_quant.quantize.sensitivity" for _, t in imports(mods["eagle3_quant.quantize.api"], lazy)))


@pytest.mark.parametrize("source, problem", [
    ("def f():\n    from eagle3_quant.validate.api import validate_draft\n", "quantize imports validate"),
    ("from eagle3_quant import push_draft\n", "quantize imports export"),
    ("import eagle3_quant.cli.render\n", "quantize imports top"),
])
def test_the_check_catches_an_upward_import(tmp_path, source, problem):
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    bad = upward_imports({"eagle3_quant.quantize.probe": probe}, lazy_table())
    assert any(problem in line for line in bad), bad


def runtime_graph(mods: dict[str, Path], lazy: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package modules it imports when it runs (at module level or in a function)."""
    known = frozenset(mods)
    return {name: {t for _, t in imports(path, lazy, known, runtime_only=True) if t in known and t != name}
            for name, path in mods.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan), as [first, ..., first] from its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while not group or module not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [circle_through(graph, group) for group in groups]


def circle_through(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest way from the group's first module back to itself, inside the group (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop(0)
        for target in sorted(graph[module] & group):
            if target == start:
                return [*paths[module], start]
            if target not in paths:
                paths[target] = [*paths[module], target]
                todo.append(target)
    raise AssertionError(f"no circle through {sorted(group)}")


def test_the_imports_that_run_form_no_circle():
    graph = runtime_graph(modules(), lazy_table())
    assert import_circles(graph) == []
    # drafting names Eagle3Draft for annotations only; the model imports drafting when it drafts
    assert "eagle3_quant.runtime.drafting" in graph["eagle3_quant.runtime.model"]
    assert "eagle3_quant.runtime.model" not in graph["eagle3_quant.runtime.drafting"]
    assert "eagle3_quant.runtime.fp8" in graph["eagle3_quant.runtime.fp8_linear"]   # from ...runtime import fp8


def test_the_circle_check_catches_a_circle(tmp_path):
    files = {"a": "import eagle3_quant.probe.b\n",
             "b": "def f():\n    from eagle3_quant.probe import c\n",
             "c": "from eagle3_quant.probe.a import X\n",
             "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from eagle3_quant.probe.a import X\n"
                  "import eagle3_quant.probe.c\n"}
    mods = {}
    for name, source in files.items():
        (tmp_path / f"{name}.py").write_text(source)
        mods[f"eagle3_quant.probe.{name}"] = tmp_path / f"{name}.py"
    graph = runtime_graph(mods, lazy_table())
    assert graph["eagle3_quant.probe.d"] == {"eagle3_quant.probe.c"}
    assert import_circles(graph) == [["eagle3_quant.probe.a", "eagle3_quant.probe.b", "eagle3_quant.probe.c",
                                      "eagle3_quant.probe.a"]]


ENGINE_PACKAGES = ("vllm", "sglang")


def engine_imports(path: Path) -> list[str]:
    """vLLM or SGLang modules `path` imports (lazy ones included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
        found += [n for n in names if n.split(".")[0] in ENGINE_PACKAGES]
    return found


def test_every_module_that_imports_an_engine_lives_in_the_engines_wing():
    outside = {name: engine_imports(path) for name, path in modules().items()
               if not name.startswith("eagle3_quant.engines.") and engine_imports(path)}
    assert outside == {}
    inside = {name for name, path in modules().items()
              if name.startswith("eagle3_quant.engines.") and engine_imports(path)}
    assert {"eagle3_quant.engines.vllm.load_child", "eagle3_quant.engines.sglang.load_child"} <= inside


def test_the_engines_wing_imports_only_the_core():
    mods, lazy = modules(), lazy_table()
    stage_imports = [f"{name}: {target}" for name, path in mods.items() if name.startswith("eagle3_quant.engines.")
                     for _, target in imports(path, lazy) if group(target) != "core"]
    assert stage_imports == []


# The core's own order: plain facts < util < reading < runtime, records < engines < taps < the core's top modules.
# A folder imports only folders ranked below it (and itself); two folders of one rank do not import each other.
CORE_RANKS = {"facts": 0, "util": 1, "reading": 2, "runtime": 3, "records": 3, "engines": 4, "taps": 5, "top": 6}
FACTS = ("eagle3_quant.errors", "eagle3_quant.options", "eagle3_quant.schemes", "eagle3_quant.scheme_gates",
         "eagle3_quant.lm_head_support", "eagle3_quant.engine_layout")


def core_folder(module: str) -> str:
    parts = module.split(".")
    if module in FACTS:
        return "facts"
    return parts[1] if len(parts) > 2 and parts[1] in CORE_RANKS else "top"


def core_order_breaks(mods: dict[str, Path], lazy: dict[str, str]) -> list[str]:
    bad = []
    for name, path in sorted(mods.items()):
        if group(name) != "core" or name == "eagle3_quant":
            continue
        mine = core_folder(name)
        for line, target in imports(path, lazy, frozenset(mods)):
            if target not in mods or group(target) != "core" or target == "eagle3_quant":
                continue
            theirs = core_folder(target)
            if theirs != mine and CORE_RANKS[theirs] >= CORE_RANKS[mine]:
                bad.append(f"{path.name}:{line}: {mine} imports {theirs} ({target})")
    return bad


def test_the_core_folders_import_only_downward():
    assert core_order_breaks(modules(), lazy_table()) == []
    assert {core_folder(m) for m in modules() if group(m) == "core"} == set(CORE_RANKS)


@pytest.mark.parametrize("module, source, problem", [
    ("eagle3_quant.reading.probe", "from eagle3_quant.records.manifest import Manifest\n",
     "reading imports records"),
    ("eagle3_quant.reading.probe", "def f():\n    from eagle3_quant.runtime import mx\n", "reading imports runtime"),
    ("eagle3_quant.runtime.probe", "import eagle3_quant.records.calibration\n", "runtime imports records"),
    ("eagle3_quant.util.probe", "from eagle3_quant.reading.config import DraftConfig\n", "util imports reading"),
])
def test_the_core_order_check_catches_an_import_against_it(tmp_path, module, source, problem):
    probe = tmp_path / "probe.py"
    probe.write_text(source)
    mods = {**modules(), module: probe}
    assert any(problem in line for line in core_order_breaks(mods, lazy_table()))
