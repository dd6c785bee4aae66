"""The changes an engine child makes to vLLM's CPU build, by name, and what each did in each vLLM process.

A child names the changes its run needs (the parent decides: none on a GPU engine); `apply` makes them in this
process and ``cpu_plugin.py`` makes them in every process vLLM starts (tensor and pipeline parallel workers run in
processes of their own, spawned on the CPU platform, which never see the child's own changes). At the end the
child asks every worker for its `process_report` (vLLM's ``collective_rpc``) and `merge` says, per change, what it
did and in which processes. Child-side: standard library at import; torch and vLLM inside the changes.

- ``static_fp8_ops``, ``fast_scaled_mm``, ``mx_emulation``: ``serve_cpu.py`` (ops the build lacks, a faster CPU
  ``torch._scaled_mm``, vLLM's MX emulation kernels registered for the CPU platform);
- ``synchronous_write``: ``cpu_connector.py`` (the hidden-states connector without pinned memory).
"""

from __future__ import annotations

import os

import cpu_connector
import serve_cpu

NAMES = ("static_fp8_ops", "fast_scaled_mm", "mx_emulation", "synchronous_write")
APPLIED: list[str] = []
WORKAROUNDS: dict[str, str] = {}          # name -> why, for the changes that act only where detected
SUMMED = ("calls", "compared_calls", "uncompared_calls")


def _synchronous_write() -> None:
    why = cpu_connector.synchronous_write()
    if why:
        WORKAROUNDS["synchronous_write"] = why


CHANGES = {"static_fp8_ops": serve_cpu.supply_static_fp8_ops, "fast_scaled_mm": serve_cpu.fast_cpu_scaled_mm,
           "mx_emulation": serve_cpu.register_mx_emulation, "synchronous_write": _synchronous_write}


def apply(names) -> None:
    """Make each named change once in this process (vLLM may load its plugins more than once)."""
    unknown = [name for name in names if name not in CHANGES]
    if unknown:
        raise ValueError(f"unknown change(s) {unknown}; known: {', '.join(NAMES)}")
    for name in names:
        if name not in APPLIED:
            APPLIED.append(name)
            CHANGES[name]()


def process_report(worker=None) -> dict:
    """What the changes did in this process; `worker` is vLLM's worker object when called through collective_rpc."""
    rank = getattr(worker, "rank", None)
    workarounds = {name: {"why": why, "calls": cpu_connector.WRITES["calls"]} for name, why in WORKAROUNDS.items()}
    return {"pid": os.getpid(), "process": f"rank {rank}" if rank is not None else "engine", "applied": list(APPLIED),
            "substituted_ops": serve_cpu.substituted_ops(), "registered_kernels": dict(serve_cpu.REGISTERED),
            "workarounds": workarounds}


def merge(reports: list[dict]) -> dict:
    """One row per op, kernel and workaround over every process (each process once: in a single-process engine the
    worker is the child itself); ``processes`` names where each acted (calls > 0: the hidden-states connector writes
    in tensor-parallel rank 0 alone) or was registered."""
    seen: dict[int, dict] = {}
    for report in reports:
        if report["pid"] not in seen or report["process"] != "engine":
            seen[report["pid"]] = report
    ops: dict[str, dict] = {}
    kernels: dict[str, dict] = {}
    workarounds: dict[str, dict] = {}
    for report in seen.values():
        where = report["process"]
        for op, row in report["substituted_ops"].items():
            merged = ops.setdefault(op, {**row, **{key: 0 for key in SUMMED if key in row}, "processes": {}})
            for key in SUMMED:
                if key in row:
                    merged[key] += row[key]
            if "max_abs_diff" in row:
                merged["max_abs_diff"] = max(merged["max_abs_diff"], row["max_abs_diff"])
            if row["calls"]:
                merged["processes"][where] = row["calls"]
        for kernel, row in report["registered_kernels"].items():
            kernels.setdefault(kernel, {**row, "processes": []})["processes"].append(where)
        for name, row in report["workarounds"].items():
            merged = workarounds.setdefault(name, {"why": row["why"], "calls": 0, "processes": {}})
            merged["calls"] += row["calls"]
            if row["calls"]:
                merged["processes"][where] = row["calls"]
    return {"substituted_ops": ops, "registered_kernels": kernels, "workarounds": workarounds,
            "processes": {report["process"]: report["applied"] for report in seen.values()}}


def everywhere(llm) -> dict:
    """`merge` of this process's report and every worker's (vLLM's ``collective_rpc``). Asked of the workers only
    when changes were made: they import this module through the plugin then, and only then can run its report."""
    workers = llm.collective_rpc(process_report) if APPLIED else []
    return merge([process_report(), *workers])
