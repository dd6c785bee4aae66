"""The kernel-path check: do the FP8 draft's linears run rowwise ``torch._scaled_mm`` correctly, on which library?

Run it on a GPU machine as one prepared script::

    python -m eagle3_quant.validate.kernel_check OUT [--device cuda:0] [--json kernel.json]
    python -m eagle3_quant.validate.kernel_check --synthetic llama3-8b --json kernel.json   # real draft shapes

On a GPU the probe runs in child processes with the BLAS libraries' logging switched on (it must be set before
they load): ``HIPBLASLT_LOG_LEVEL=2`` and ``ROCBLAS_LAYER=1`` on ROCm, ``CUBLASLT_LOG_LEVEL=2`` on CUDA, then once
more without logging for the timing. Evidence that hipBLASLt ran on ROCm: its matmul log lines, no rocBLAS GEMM
trace, the profiler's kernel names and ``torch.backends.cuda.preferred_blas_library()``; ``Cijk_`` kernel names
alone prove nothing (Tensile serves rocBLAS too). On a CPU only the numerics run; the GPU path is ``skipped``.
An MX artifact takes validate/mx_kernel_probe.py instead: on gfx950 with AITER the native MXFP4 GEMM vLLM runs there
against the dequantized reference (phase ``mx``); anywhere else ``skipped`` with the device and the reason.

The ``kernel`` object of the report::

    {"status": "passed" | "failed" | "skipped", "reason": str, "device": str, "platform": {...},
     "backend": str | null, "preferred_blas_library": str | null, "kernels": [names], "kernel_counts": {...},
     "log_evidence": {"library", "hipblaslt_matmul_lines", "rocblas_gemm_lines", "cublaslt_matmul_lines",
                      "matmul_calls", "fp8_matmul_calls", "operand_types", "output_type", "scale_mode",
                      "matmul_forms", "gemm_families", "fp8_gemm_families", "other_kernels", "sample"},
                     # validate/kernel_evidence.py
     "numerics": [{"module", "rows", "format", "max_rel_error", "bit_exact", "tolerance", "ok"}],
     "timing": {"batch_sizes", "layers", "total_bf16_ms", "total_fp8_ms", "fp8_over_bf16", ...} | null,
     "timing_skipped": str}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from eagle3_quant.validate.kernel_evidence import KernelEvidence, scale_words
from eagle3_quant.validate.report import Check, failed, passed, skipped

PROBE_TIMEOUT_S = 900


def probe(out: Path, device: str, phase: str) -> dict:
    """One phase in this process: "evidence" (numerics + profiler) or "timing"."""
    import torch

    from eagle3_quant.validate.kernel_probe import numerics, profile_kernels, read_fp8_weights, time_linears
    from eagle3_quant.validate.platform import detect_platform

    platform = detect_platform(device)
    weights = read_fp8_weights(out, platform.device)
    result: dict = {"platform": platform.to_dict()}
    if phase in ("evidence", "numerics"):
        result["numerics"] = numerics(weights, platform)
    if phase == "mx":
        from eagle3_quant.validate.mx_kernel_probe import native_mxfp4_numerics

        return {"platform": platform.to_dict(), "numerics": native_mxfp4_numerics(out, platform.device)}
    if phase == "evidence" and platform.kind != "cpu":
        result.update(profile_kernels(weights, platform))
        tensorwise = all(w.scale.numel() == 1 and w.input_scale is not None for w in weights)
        result["scale_mode"] = "tensorwise" if tensorwise else "rowwise"
        result["preferred_blas_library"] = str(torch.backends.cuda.preferred_blas_library())
    if phase == "timing" and platform.kind != "cpu":
        result["timing"] = time_linears(weights, platform)
    return result


def _child(out: Path, device: str, phase: str, env: dict[str, str], workdir: Path) -> dict:
    result_file = workdir / f"{phase}.json"
    cmd = [sys.executable, "-m", "eagle3_quant.validate.kernel_check", str(out), "--device", device,
           "--phase", phase, "--json", str(result_file)]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0 or not result_file.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"probe phase {phase!r} exited with {done.returncode}: {' | '.join(tail)}",
                "stdout": done.stdout}
    result = json.loads(result_file.read_text())
    result["stdout"] = done.stdout
    return result


def _log_env(kind: str, workdir: Path) -> dict[str, str]:
    if kind == "rocm":
        return {"HIPBLASLT_LOG_LEVEL": "2", "HIPBLASLT_LOG_FILE": str(workdir / "hipblaslt_%i.log"),
                "ROCBLAS_LAYER": "1", "ROCBLAS_LOG_TRACE_PATH": str(workdir / "rocblas_trace.log")}
    return {"CUBLASLT_LOG_LEVEL": "2", "CUBLASLT_LOG_FILE": str(workdir / "cublaslt_%i.log")}


def judge(kind: str, evidence: KernelEvidence, numerics_ok: bool, scale_mode: str = "rowwise",
          ) -> tuple[str, str, str | None]:
    """(status, reason, backend) of the GPU kernel path: the BLAS library's log first, the kernel names second.
    `scale_mode` is what this artifact's linears pass to ``_scaled_mm`` (rowwise, or tensorwise for per-tensor
    weights with static inputs)."""
    if not numerics_ok:
        return "failed", "scaled_mm results differ from the dequantized reference", None
    kernels = evidence.describe_kernels()
    if kind == "rocm":
        return _judge_rocm(evidence, kernels)
    return _judge_cuda(evidence, scale_mode, kernels)


def _judge_cuda(evidence: KernelEvidence, scale_mode: str, kernels: str) -> tuple[str, str, str | None]:
    fp8 = evidence.fp8_calls()
    if fp8:
        ran = f"cuBLASLt ran {len(fp8)} FP8 matmuls"
        odd = [c for c in fp8 if (c.a_type, c.b_type) != ("E4M3", "E4M3")]
        if odd:
            return "failed", f"{ran}, {len(odd)} with {odd[0].operands} operands; this artifact's FP8 weights and " \
                             f"activations are E4M3; {kernels}", "cuBLASLt"
        modes = sorted({scale_words(c.scale_mode) for c in fp8})
        if modes != [scale_words(scale_mode)]:
            return "failed", f"{ran} with {' and '.join(modes)}; this artifact's linears pass " \
                             f"{scale_words(scale_mode)}; {kernels}", "cuBLASLt"
        return "passed", f"{ran} ({evidence.form().describe()}); {kernels}", "cuBLASLt"
    named = evidence.fp8_gemm_families
    if "CUTLASS" in named:
        return "passed", f"ATen's CUTLASS FP8 GEMM ran (no cuBLASLt call); {kernels}", "CUTLASS (ATen rowwise)"
    if evidence.cublaslt:
        return "failed", f"cuBLASLt ran {len(evidence.cublaslt)} matmuls, none with FP8 operands " \
                         f"({evidence.form().describe()}); {kernels}", None
    if not named:
        return "failed", f"no FP8 GEMM in cuBLASLt's log (CUBLASLT_LOG_LEVEL=2) nor among the profiler's kernels; " \
                         f"{kernels}", None
    backend = "cuBLASLt" if any(f.startswith("nvjet") for f in named) else \
        "cuBLAS" if "cuBLAS xmma" in named else "unknown"
    return "passed", f"no cuBLASLt log line was written (CUBLASLT_LOG_LEVEL=2); the profiler saw FP8 GEMM " \
                     f"kernels; {kernels}", backend


def _judge_rocm(evidence: KernelEvidence, kernels: str) -> tuple[str, str, str | None]:
    if not evidence.gemm_families:
        return "failed", f"the profiler saw no GEMM kernel during the FP8 linears; {kernels}", None
    if not evidence.hipblaslt_lines:
        return "failed", "no hipBLASLt matmul log line (HIPBLASLT_LOG_LEVEL=2): hipBLASLt did not run", None
    if evidence.rocblas_gemm_lines:
        return "failed", f"rocBLAS traced {evidence.rocblas_gemm_lines} GEMM call(s): a fallback ran", None
    form = evidence.form()
    operands = f", {form.describe()}" if form else ""
    return "passed", f"hipBLASLt ran the FP8 GEMMs ({evidence.hipblaslt_lines} log lines{operands}, no rocBLAS " \
                     f"GEMM); {kernels}", "hipBLASLt"


def _mx_config(out: Path) -> dict | None:
    """The Quark config of an MX artifact, None for any other."""
    try:
        qc = json.loads((out / "config.json").read_text()).get("quantization_config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    weight = (qc.get("global_quant_config") or {}).get("weight") if isinstance(qc, dict) else None
    return qc if isinstance(weight, dict) and weight.get("dtype") in ("fp4", "fp6_e2m3", "fp6_e3m2") else None


def run_mx_kernel_check(out: Path, platform, quant_config: dict) -> dict:
    """The ``kernel`` object of an MX artifact: the native MX GEMM on gfx950 (validate/mx_kernel_probe.py), else
    skipped with the reason."""
    from eagle3_quant.validate.mx_kernel_probe import aiter_found, judge_mx_rows, mx_gemm_plan

    base = {"device": platform.device, "platform": platform.to_dict(), "mx": True, "kernels": [], "timing": None,
            "timing_skipped": "MX GEMM timing is not measured"}
    plan = mx_gemm_plan(platform, quant_config, platform.kind == "rocm" and aiter_found())
    if plan.gemm is None:
        return {**base, "status": "skipped", "reason": plan.reason, "numerics": []}
    with tempfile.TemporaryDirectory(prefix="eagle3-mx-kernel-") as tmp:
        run = _child(out, platform.device, "mx", {}, Path(tmp))
    if "error" in run:
        return {**base, "status": "failed", "reason": run["error"], "backend": plan.gemm, "numerics": []}
    status, reason = judge_mx_rows(run["numerics"])
    return {**base, "status": status, "reason": reason, "backend": plan.gemm, "numerics": run["numerics"]}


def run_kernel_check(out: str | Path, device: str | None = None) -> dict:
    """The report's ``kernel`` object for OUT on `device` (default: the first GPU, else the CPU)."""
    from eagle3_quant.validate.platform import detect_platform

    out = Path(out).resolve()
    platform = detect_platform(device)
    base = {"device": platform.device, "platform": platform.to_dict()}
    mx_config = _mx_config(out)
    if mx_config is not None:
        return run_mx_kernel_check(out, platform, mx_config)
    if platform.kind == "cpu":
        result = probe(out, "cpu", "numerics")
        return {**base, "status": "skipped", "backend": "CPU reference (dequantize + matmul)",
                "reason": "no ROCm/CUDA GPU here: the FP8 GEMM path (hipBLASLt on MI355X) was not run; run "
                          "`python -m eagle3_quant.validate.kernel_check OUT` on the GPU machine",
                "kernels": [], "numerics": result["numerics"], "timing": None,
                "timing_skipped": "CPU timings say nothing about GPU kernels"}
    if not platform.scaled_mm_supported:
        return {**base, "status": "skipped", "reason": f"{platform.name} ({platform.arch}) has no FP8 GEMMs "
                "(needs sm89+, gfx942 or gfx950)", "kernels": [], "numerics": [], "timing": None,
                "timing_skipped": "no FP8 GEMMs on this device"}
    with tempfile.TemporaryDirectory(prefix="eagle3-kernel-") as tmp:
        workdir = Path(tmp)
        evidence_run = _child(out, platform.device, "evidence", _log_env(platform.kind, workdir), workdir)
        lines = [ln for log in sorted(workdir.glob("*.log")) for ln in log.read_text(errors="replace").splitlines()]
        lines += evidence_run.get("stdout", "").splitlines()
        timing_run = _child(out, platform.device, "timing", {}, workdir)
    if "error" in evidence_run:
        return {**base, "status": "failed", "reason": evidence_run["error"], "kernels": [], "timing": None}
    counts = evidence_run.get("kernels", {})
    evidence = KernelEvidence.read(lines, counts)
    numerics_rows = evidence_run["numerics"]
    status, reason, backend = judge(platform.kind, evidence, all(r["ok"] for r in numerics_rows),
                                    evidence_run.get("scale_mode", "rowwise"))
    return {**base, "status": status, "reason": reason, "backend": backend,
            "preferred_blas_library": evidence_run.get("preferred_blas_library"), "kernels": sorted(counts),
            "kernel_counts": counts, "ops": evidence_run.get("ops", {}), "log_evidence": evidence.to_dict(),
            "numerics": numerics_rows, "timing": timing_run.get("timing"),
            "timing_skipped": timing_run.get("error")}


def kernel_checks(kernel: dict) -> list[Check]:
    """kernel_numerics, kernel_path and mi355x checks from the ``kernel`` object."""
    rows = kernel.get("numerics") or []
    platform = kernel.get("platform", {})
    where = "CPU (reference build of torch._scaled_mm)" if platform.get("kind") == "cpu" else \
        f"{platform.get('name')} ({platform.get('arch')})"
    if not rows:
        checks = [skipped("kernel_numerics", kernel.get("reason", "not run"))]
    else:
        bad = [r for r in rows if not r["ok"]]
        worst = max(r["max_rel_error"] for r in rows)
        formats = sorted({r["format"] for r in rows})
        text = f"{len({r['module'] for r in rows})} linears x {len({r['rows'] for r in rows})} row counts " \
               f"({', '.join(formats)}) on {where}: max relative error {worst:.2e}"
        checks = [(failed if bad else passed)("kernel_numerics", text, max_rel_error=worst)]
    status = kernel.get("status", "skipped")
    path_check = {"passed": passed, "failed": failed}.get(status, skipped)
    checks.append(path_check("kernel_path", kernel.get("reason", ""), backend=kernel.get("backend")))
    if kernel.get("mx"):
        checks.append(skipped("mi355x_hipblaslt", "MX artifact: its GEMM is AITER's MX kernel or vLLM's emulation, "
                                                  "not an FP8 hipBLASLt GEMM (kernel_path says which)"))
    elif platform.get("model") == "MI355X":
        checks.append(path_check("mi355x_hipblaslt", kernel.get("reason", "")))
    else:
        checks.append(skipped("mi355x_hipblaslt", f"needs an MI355X (ROCm gfx950); this run's device is {where}"))
    return checks


def _synthetic_fp8(shape: str, workdir: Path) -> Path:
    from eagle3_quant.quantize.api import quantize_draft

    try:   # the synthetic drafts are test support: they ship with the checkout, not the wheel
        from fixtures.synthetic import write_synthetic_draft
    except ImportError:
        raise SystemExit("--synthetic needs the eagle3-quant checkout: run it from the repository root") from None

    src = write_synthetic_draft(workdir / "src", shape)
    return quantize_draft(src, workdir / "fp8", device="cpu").output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3_quant.validate.kernel_check",
                                     description="FP8 kernel-path check of an FP8 Eagle3 draft folder.")
    parser.add_argument("out", type=Path, nargs="?", help="FP8 draft folder (or use --synthetic)")
    parser.add_argument("--synthetic", choices=("tiny", "llama3-8b", "kimi-k2.5"), default=None,
                        help="check a synthetic draft of this shape, quantized here with eagle3-quant first")
    parser.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: first GPU, else CPU)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--phase", choices=("evidence", "timing", "numerics", "mx"), default=None,
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        result = probe(args.out, args.device or "cpu", args.phase)
        args.json.write_text(json.dumps(result, indent=2, allow_nan=False))
        return 0
    if (args.out is None) == (args.synthetic is None):
        parser.error("give OUT or --synthetic SHAPE")
    if args.synthetic:
        with tempfile.TemporaryDirectory(prefix="eagle3-kernel-draft-") as tmp:
            kernel = run_kernel_check(_synthetic_fp8(args.synthetic, Path(tmp)), args.device)
    else:
        kernel = run_kernel_check(args.out, args.device)
    if args.json:
        args.json.write_text(json.dumps(kernel, indent=2, allow_nan=False) + "\n")
    for check in kernel_checks(kernel):
        print(f"{check.status:8} {check.name:18} {check.detail}")
    if kernel.get("kernel_counts"):       # by family; the full names only in the JSON
        where = f"full names in {args.json}" if args.json else "full names with --json FILE"
        print(f"kernels by family ({where}): {KernelEvidence.read([], kernel['kernel_counts']).describe_kernels()}")
    timing = kernel.get("timing")
    if timing:
        from eagle3_quant.validate.linear_timing import timing_lines

        print("\n".join(timing_lines(timing)))
    return 1 if kernel.get("status") == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
