"""The changes an engine child makes to vLLM's CPU build (``vllm/cpu_changes.py``, in every vLLM process): which a
run asks for, and what they did, in words: each op supplied, kernel registered and workaround applied, with the vLLM
processes where it acted."""

from __future__ import annotations

from eagle3_quant.engines.environment import EngineInfo


def changes_for(info: EngineInfo, mx: bool, hidden_states: bool = False) -> list[str]:
    """The changes a run asks for: the static-FP8 ops and the fp32 GEMM for FP8 on a CPU engine, vLLM's MX emulation
    kernels when the run serves MX weights there; for vLLM's hidden-state export, the synchronous write on any
    engine (it acts only where the platform has no pinned memory)."""
    changes = ["synchronous_write"] if hidden_states else []
    if info.cpu:
        changes += ["static_fp8_ops", "fast_scaled_mm", *(["mx_emulation"] if mx else [])]
    return changes


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
