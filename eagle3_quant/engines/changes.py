"""What an engine child's changes to vLLM's CPU build did, in words: each op supplied, kernel registered and
workaround applied, with the vLLM processes where it acted (``vllm/cpu_changes.py`` merges them)."""

from __future__ import annotations


def _where(processes) -> str:
    names = list(processes)
    return f" in {', '.join(names)}" if names else ""


def change_lines(result: dict) -> list[str]:
    """One line per change that acted, from an engine child's result."""
    lines = [f"vLLM workaround {name}{_where(row.get('processes', {}))}: {row['why']}"
             for name, row in result.get("workarounds", {}).items()]
    lines += [f"substituted {op} ({row['why']}): {row['with']}, called {row['calls']} times"
              f"{_where(row.get('processes', {}))}"
              for op, row in result.get("substituted_ops", {}).items() if row.get("calls")]
    lines += [f"registered {kernel} for vLLM's {row['platform']} platform{_where(row.get('processes', []))}: "
              f"{row['why']}" for kernel, row in result.get("registered_kernels", {}).items()]
    return lines
