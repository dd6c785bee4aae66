"""The kernel check of an artifact whose scheme is not the FP8 path (INT8, INT4, NVFP4, MXFP8, MX): the device's row
of validate/gemm_devices.py decides what runs.

- A probe there (``torch._int_mm``, ``torch._scaled_mm`` with block scales): two children, as on the FP8 path: the
  GEMMs alone with the BLAS libraries logging (``gemm_evidence``; nothing else that would log a GEMM), then the
  numerics against the dequantized reference without logging (``gemm_numerics``); judged by
  validate/kernel_judgement.py ``judge`` like the FP8 path: every matmul call of the scheme's element types and
  scale mode, a BF16 (dequantized) GEMM, other scales or rocBLAS fails. A probe PyTorch refuses on this build is
  ``skipped`` with PyTorch's reason.
- No probe (no native GEMM in vLLM there, or vLLM's own kernels such as W4A16's that this check does not run):
  ``skipped`` with the row's reason; never ``passed``.
- On a CPU: ``skipped``; an INT8 artifact still has its numerics (``torch._int_mm`` runs on a CPU too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from eagle3_quant.schemes import SCHEMES
from eagle3_quant.validate.blas_logging import LogSettings
from eagle3_quant.validate.gemm_devices import DEVICES, INT_MM, device_gemm
from eagle3_quant.validate.gemm_forms import SCHEME_GEMMS
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_judgement import judge

# (phase, logged) -> (the child's result, its log lines, the logging it ran with)
RunPhase = Callable[[str, bool], tuple[dict, list[str], LogSettings]]
GEMM_PHASES = ("gemm_evidence", "gemm_numerics")


def gemm_probe(out: Path, platform, phase: str) -> dict:
    """In the child: the scheme's probe on this device, kernels (``gemm_evidence``) or numerics (``gemm_numerics``);
    ``unsupported`` with PyTorch's message when this build refuses the GEMM."""
    from eagle3_quant.validate.block_gemm_probe import block_kernels, block_numerics, read_block_weights
    from eagle3_quant.validate.int8_probe import int8_kernels, int8_numerics, read_int8_weights

    int8 = read_int8_weights(out, platform.device)
    weights, kernels, numerics = (int8, int8_kernels, int8_numerics) if int8 else \
        (read_block_weights(out, platform.device), block_kernels, block_numerics)
    try:
        return kernels(weights, platform) if phase == "gemm_evidence" else {"numerics": numerics(weights, platform)}
    except (RuntimeError, NotImplementedError) as exc:   # this torch build has no such GEMM here
        return {"unsupported": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"}


def _profiles(name: str) -> str:
    return ", ".join(SCHEMES[name].native_devices) or "no device in vLLM 0.33"


def run_scheme_kernel_check(out: Path, platform, name: str, run_phase: RunPhase) -> dict:
    """The ``kernel`` object of an artifact of scheme `name` (not the FP8 path) on `platform`."""
    expected = SCHEME_GEMMS[name].on(platform.arch)
    row = device_gemm(name, platform.arch)
    base = {"device": platform.device, "platform": platform.to_dict(), "scheme": name, "fp8_path": False,
            "expected": asdict(expected), "kernels": [], "numerics": [], "timing": None,
            "timing_skipped": "timed on the FP8 path only"}
    if platform.kind == "cpu":
        numerics = gemm_probe(out, platform, "gemm_numerics").get("numerics", []) \
            if SCHEMES[name].weight.kind == "int8" else []
        return {**base, "status": "skipped", "numerics": numerics, "probe": INT_MM if numerics else None,
                "reason": f"no ROCm/CUDA GPU here: {name}'s GEMM ({expected.describe()}) was not run; vLLM runs it "
                          f"natively on {_profiles(name)}; run `python -m eagle3_quant.validate.kernel_check OUT` on "
                          "the GPU machine"}
    if row is None:
        return {**base, "status": "skipped", "reason": f"{platform.name} ({platform.arch}) is not a device the "
                f"kernel check knows ({', '.join(DEVICES)}); {name} runs natively on {_profiles(name)}"}
    if row.probe is None:
        return {**base, "status": "skipped", "reason": row.reason, "vllm_runs": row.vllm_runs}
    base = {**base, "probe": row.probe, "vllm_runs": row.vllm_runs}
    evidence_run, lines, log_used = run_phase("gemm_evidence", True)
    numerics_run = run_phase("gemm_numerics", False)[0] if "error" not in evidence_run else {}
    for run in (evidence_run, numerics_run):
        if "error" in run:
            return {**base, "status": "failed", "reason": run["error"]}
        if "unsupported" in run:
            return {**base, "status": "skipped", "reason": f"{row.probe} is not available in this PyTorch build on "
                    f"{platform.name} ({platform.arch}): {run['unsupported']}; the check cannot judge this path"}
    counts = evidence_run.get("kernels", {})
    evidence = KernelEvidence.read(lines, counts, log_used.describe())
    rows = numerics_run["numerics"]
    status, reason, backend = judge(row.expected, evidence, bool(rows) and all(r["ok"] for r in rows))
    return {**base, "status": status, "reason": log_used.with_notes(reason), "backend": backend, "numerics": rows,
            "kernels": sorted(counts), "kernel_counts": counts, "log_evidence": evidence.to_dict()}
