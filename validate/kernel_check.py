"""The kernel-path check: do the quantized draft's linears run the GEMM their scheme needs, correctly, on which library?

Run it on a GPU machine as one prepared script::

    python -m eagle3_quant.validate.kernel_check OUT [--device cuda:0] [--json kernel.json]
    python -m eagle3_quant.validate.kernel_check --synthetic llama3-8b --json kernel.json   # real draft shapes

On a GPU two child processes run: the FP8 linears alone with the BLAS libraries' logging on (it must be set
before they load; validate/blas_logging.py: hipBLASLt's trace and bench lines and rocBLAS's trace on ROCm,
cuBLASLt's trace on CUDA, into files the check owns) under the profiler; then, without logging, the numerics
against the dequantized reference and the timing. The GEMM the artifact's scheme needs (validate/gemm_forms.py) is
judged alike for every vendor (validate/kernel_judgement.py). On a CPU only the numerics run; the GPU path is
``skipped``. An MXFP4 artifact on gfx950 takes validate/mx_kernel_probe.py: with AITER the native MXFP4 GEMM vLLM
runs there against the dequantized reference, its kernel named (phase ``mx``). Any other scheme that is not FP8
takes validate/scheme_kernel_check.py: its device's row of validate/gemm_devices.py says what runs or why nothing
can (phases ``gemm_evidence``, ``gemm_numerics``).

The ``kernel`` object of the report::

    {"status": "passed" | "failed" | "skipped", "reason": str, "device": str, "platform": {...},
     "expected": {"scheme", "element", "scale_mode", "out_type"}, "backend": str | null,
     "preferred_blas_library": str | null, "kernels": [names], "kernel_counts": {...},
     "log_evidence": {...},                     # validate/kernel_evidence.py KernelEvidence.to_dict
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
from dataclasses import asdict
from pathlib import Path

from eagle3_quant.schemes import SCHEMES
from eagle3_quant.validate.blas_logging import LogSettings, log_settings
from eagle3_quant.validate.gemm_devices import NATIVE_MXFP4, device_gemm
from eagle3_quant.validate.gemm_forms import SCHEME_GEMMS, expected_gemm, scheme_of
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_judgement import judge, judge_mx
from eagle3_quant.validate.report import Check, failed, passed, skipped
from eagle3_quant.validate.scheme_kernel_check import GEMM_PHASES, gemm_probe, run_scheme_kernel_check

PROBE_TIMEOUT_S = 900
MX_SCHEME = "w_mxfp4_a_mxfp4"


def probe(out: Path, device: str, phase: str) -> dict:
    """One phase in this process: "evidence" (the FP8 linears under the profiler; its parent logs the BLAS
    libraries), "measure" (numerics and timing), "numerics" (the CPU), "mx" (the native MX GEMM)."""
    import torch

    from eagle3_quant.validate.kernel_probe import numerics, profile_kernels, read_fp8_weights, time_linears
    from eagle3_quant.validate.platform import detect_platform

    platform = detect_platform(device)
    if phase in GEMM_PHASES:
        return {"platform": platform.to_dict(), **gemm_probe(out, platform, phase)}
    if phase == "mx":
        from eagle3_quant.validate.mx_kernel_probe import native_mxfp4_numerics

        return {"platform": platform.to_dict(), **native_mxfp4_numerics(out, platform.device)}
    weights = read_fp8_weights(out, platform.device)
    result: dict = {"platform": platform.to_dict()}
    if phase == "evidence":
        result.update(profile_kernels(weights, platform))
        tensorwise = all(w.scale.numel() == 1 and w.input_scale is not None for w in weights)
        result["scale_mode"] = "tensorwise" if tensorwise else "rowwise"
        result["preferred_blas_library"] = str(torch.backends.cuda.preferred_blas_library())
        return result
    result["numerics"] = numerics(weights, platform)
    if phase == "measure":
        try:
            result["timing"] = time_linears(weights, platform)
        except Exception as exc:   # the numerics stand; the timing says why it is missing
            result["timing_error"] = f"timing failed: {type(exc).__name__}: {exc}"
    return result


def _child(out: Path, device: str, phase: str, env: dict[str, str], workdir: Path) -> dict:
    result_file = workdir / f"{phase}.json"
    cmd = [sys.executable, "-m", "eagle3_quant.validate.kernel_check", str(out), "--device", device,
           "--phase", phase, "--json", str(result_file)]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0 or not result_file.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"probe phase {phase!r} exited with {done.returncode}: {' | '.join(tail)}",
                "output": done.stdout + done.stderr}
    result = json.loads(result_file.read_text())
    result["output"] = done.stdout + done.stderr   # a library that cannot open its log file writes to stderr
    return result


def _logged_child(out: Path, platform, phase: str, workdir: Path) -> tuple[dict, list[str], LogSettings]:
    """A child with the BLAS logs on: its result, every log line it wrote, the logging it ran with."""
    settings = log_settings(platform.kind, workdir, os.environ)
    run = _child(out, platform.device, phase, settings.env, workdir)
    logs = sorted(workdir.glob("*.log"))
    lines = [ln for log in logs for ln in log.read_text(errors="replace").splitlines()]
    return run, lines + run.get("output", "").splitlines(), settings


def _phase_runner(out: Path, platform, workdir: Path):
    """run_phase(phase, logged) for validate/scheme_kernel_check.py: a child, logged or not, in `workdir`."""
    def run_phase(phase: str, logged: bool) -> tuple[dict, list[str], LogSettings]:
        if logged:
            return _logged_child(out, platform, phase, workdir)
        return _child(out, platform.device, phase, {}, workdir), [], LogSettings({})

    return run_phase


def _quant_config(out: Path) -> dict:
    """The artifact's Quark ``quantization_config`` ({} when absent or unreadable: the probe reads the tensors)."""
    try:
        qc = json.loads((out / "config.json").read_text()).get("quantization_config")
    except (OSError, ValueError, AttributeError):
        return {}
    return qc if isinstance(qc, dict) else {}


def _mx_config(out: Path) -> dict | None:
    """The Quark config of an MX artifact, None for any other."""
    qc = _quant_config(out)
    global_config = qc.get("global_quant_config")
    weight = global_config.get("weight") if isinstance(global_config, dict) else None
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
        run, lines, log_used = _logged_child(out, platform, "mx", Path(tmp))
    if "error" in run:
        return {**base, "status": "failed", "reason": run["error"], "backend": plan.gemm, "numerics": []}
    counts = run.get("kernels", {})
    evidence = KernelEvidence.read(lines, counts, log_used.describe())
    status, reason = judge_mx(judge_mx_rows(run["numerics"]), SCHEME_GEMMS[MX_SCHEME], evidence)
    return {**base, "status": status, "reason": log_used.with_notes(reason), "backend": plan.gemm,
            "numerics": run["numerics"],
            "kernels": sorted(counts), "kernel_counts": counts, "log_evidence": evidence.to_dict()}


def run_kernel_check(out: str | Path, device: str | None = None) -> dict:
    """The report's ``kernel`` object for OUT on `device` (default: the first GPU, else the CPU)."""
    from eagle3_quant.validate.platform import detect_platform

    out = Path(out).resolve()
    platform = detect_platform(device)
    base = {"device": platform.device, "platform": platform.to_dict()}
    quant_config = _quant_config(out)
    scheme = scheme_of(quant_config)
    row = device_gemm(scheme, platform.arch) if scheme else None
    if scheme and SCHEMES[scheme].weight.kind != "fp8" and not (row and row.probe == NATIVE_MXFP4):
        with tempfile.TemporaryDirectory(prefix="eagle3-kernel-") as tmp:
            return run_scheme_kernel_check(out, platform, scheme, _phase_runner(out, platform, Path(tmp)))
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
        evidence_run, lines, log_used = _logged_child(out, platform, "evidence", Path(tmp))
        measure_run = _child(out, platform.device, "measure", {}, Path(tmp)) if "error" not in evidence_run else {}
    for run in (evidence_run, measure_run):
        if "error" in run:
            return {**base, "status": "failed", "reason": run["error"], "kernels": [], "timing": None}
    counts = evidence_run.get("kernels", {})
    evidence = KernelEvidence.read(lines, counts, log_used.describe())
    expected = expected_gemm(quant_config, evidence_run.get("scale_mode", "rowwise")).on(platform.arch)
    numerics_rows = measure_run["numerics"]
    status, reason, backend = judge(expected, evidence, all(r["ok"] for r in numerics_rows))
    return {**base, "status": status, "reason": log_used.with_notes(reason), "backend": backend,
            "expected": asdict(expected),
            "preferred_blas_library": evidence_run.get("preferred_blas_library"), "kernels": sorted(counts),
            "kernel_counts": counts, "ops": evidence_run.get("ops", {}), "log_evidence": evidence.to_dict(),
            "numerics": numerics_rows, "timing": measure_run.get("timing"),
            "timing_skipped": measure_run.get("timing_error")}


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
    elif kernel.get("fp8_path") is False:
        checks.append(skipped("mi355x_hipblaslt", f"{kernel.get('scheme')} artifact: not the FP8 path (kernel_path "
                                                  "judges its GEMM)"))
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
    parser.add_argument("--phase", choices=("evidence", "measure", "numerics", "mx", *GEMM_PHASES), default=None,
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
