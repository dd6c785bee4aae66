"""The gfx950 MX GEMM check (validate/mx_kernel_probe.py): which device runs it and why others skip, the reference
math it compares with, the verdict from its rows. The native GEMM itself needs an MI355X with AITER: never run
here, never reported passed without running."""

from __future__ import annotations

import json

import pytest
import torch

from eagle3_quant.runtime import mx
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.validate.kernel_check import kernel_checks, run_mx_kernel_check
from eagle3_quant.validate.mx_kernel_probe import (
    MX_TOLERANCE,
    NATIVE_MXFP4,
    judge_mx_rows,
    mx_gemm_plan,
    mx_reference,
)
from eagle3_quant.validate.platform import Platform

MI355X = Platform("rocm", "cuda:0", "AMD Instinct MI355X", "gfx950", "2.9", "7.0")
MI300X = Platform("rocm", "cuda:0", "AMD Instinct MI300X", "gfx942", "2.9", "7.0")
H200 = Platform("cuda", "cuda:0", "NVIDIA H200", "sm_90", "2.9", "12.8")
CPU = Platform("cpu", "cpu", "cpu", None, "2.9", None)


def _qc(weight: str, inputs: str, dynamic: bool) -> dict:
    return {"global_quant_config": {"weight": {"dtype": weight}, "input_tensors": {"dtype": inputs,
                                                                                   "is_dynamic": dynamic}}}


W4A4, W4A8, W6A6 = _qc("fp4", "fp4", True), _qc("fp4", "fp8_e4m3", False), _qc("fp6_e2m3", "fp6_e2m3", True)


@pytest.mark.parametrize(("platform", "config", "aiter", "runs", "reason"), [
    (MI355X, W4A4, True, True, "gfx950: AITER gemm_afp4wfp4"),
    (MI355X, W4A4, False, False, "without AITER: vLLM 0.33 would fall back to EmulationMxfp4LinearKernel"),
    (MI355X, W6A6, True, False, "lists only EmulationMxfp6LinearKernel for ROCm"),
    (MI355X, W4A8, True, False, "gemm_a8wfp4"),
    (MI300X, W4A4, True, False, "this is AMD Instinct MI300X (gfx942): native MX GEMMs need gfx950 (MI355X)"),
    (H200, W4A4, True, False, "this is NVIDIA H200 (sm_90): native MX GEMMs need gfx950"),
    (CPU, W6A6, False, False, "MXFP6 E2M3 artifact: this is cpu (cpu): native MX GEMMs need gfx950"),
])
def test_which_device_runs_the_mx_gemm_and_why_others_skip(platform, config, aiter, runs, reason):
    plan = mx_gemm_plan(platform, config, aiter)
    assert (plan.gemm == NATIVE_MXFP4) == runs and reason in plan.reason


def test_off_gfx950_the_kernel_object_is_skipped_with_the_device_and_no_child_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", lambda *a: pytest.fail("no probe off gfx950"))
    kernel = run_mx_kernel_check(tmp_path, MI300X, W4A4)
    assert kernel["status"] == "skipped" and "MI300X (gfx942)" in kernel["reason"] and kernel["numerics"] == []
    checks = {c.name: c for c in kernel_checks(kernel)}
    assert all(c.status == "skipped" for c in checks.values())
    assert "not an FP8 hipBLASLt GEMM" in checks["mi355x_hipblaslt"].detail


def test_on_gfx950_the_rows_and_the_native_kernel_decide_and_a_crash_fails(tmp_path, monkeypatch):
    """The child's numerics rows, and the kernel it launched: AITER's Triton MXFP4 GEMM (its name decoded by
    validate/kernel_names.py; what else counts as native: tests/test_kernel_vendor_logs.py)."""
    monkeypatch.setattr("eagle3_quant.validate.mx_kernel_probe.aiter_found", lambda: True)
    row = {"module": "m", "format": "mxfp4 x mxfp4", "bit_exact": False, "tolerance": MX_TOLERANCE}
    rows = [{**row, "rows": 1, "max_rel_error": 1e-3, "ok": True},
            {**row, "rows": 16, "max_rel_error": 0.5, "ok": False}]
    native = {"_gemm_afp4_wfp4_kernel": 3, "_dynamic_mxfp4_quant_kernel": 3}
    seen = []

    def child(numerics, kernels):
        return lambda out, device, phase, env, workdir: seen.append(env) or {"numerics": numerics, "kernels": kernels}

    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", child(rows, native))
    kernel = run_mx_kernel_check(tmp_path, MI355X, W4A4)
    assert kernel["status"] == "failed" and "rows 16" in kernel["reason"] and kernel["backend"] == NATIVE_MXFP4
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", child(rows[:1], native))
    kernel = run_mx_kernel_check(tmp_path, MI355X, W4A4)
    assert kernel["status"] == "passed" and f"within {MX_TOLERANCE}" in kernel["reason"]
    assert "AITER's kernel name shows E2M1 x E2M1 -> BF16, UE8M0 scales per block of 32" in kernel["reason"]
    assert kernel["kernel_counts"] == native and seen[-1]["HIPBLASLT_LOG_MASK"] == "35"
    assert {c.name: c.status for c in kernel_checks(kernel)}["kernel_path"] == "passed"
    # within bounds but no native MX GEMM ran (an emulation's BF16 GEMM): the numerics alone do not pass it
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child",
                        child(rows[:1], {"Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1_SN": 3}))
    kernel = run_mx_kernel_check(tmp_path, MI355X, W4A4)
    assert kernel["status"] == "failed" and "no native MX GEMM (E2M1 x E2M1 with UE8M0 scales per block of 32) " \
                                            "ran: GEMM kernels: Cijk x3" in kernel["reason"]
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", lambda *a: {"error": "probe exited with 1"})
    assert run_mx_kernel_check(tmp_path, MI355X, W4A4)["status"] == "failed"
    assert judge_mx_rows([])[0] == "failed"


def test_the_reference_is_the_runtime_mx_linear_in_fp32():
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(48, 128, generator=gen)
    packed, scale = mx.quantize_mx(weight, "fp4")
    x = torch.randn(16, 128, generator=gen).to(torch.bfloat16)
    ref = mx_reference(x, packed, scale)
    ours = MxLinear(packed, scale, "mxfp4")(x.float())
    assert ref.dtype == torch.bfloat16 and torch.equal(ref, ours.to(torch.bfloat16))
    # an MXFP4 weight off by one code in one block moves the output past nothing the bound would hide
    wrong = packed.clone()
    wrong[0, 0] ^= 0x07
    assert not torch.equal(mx_reference(x, wrong, scale), ref)


def test_run_kernel_check_routes_mx_artifacts_to_the_mx_check(tmp_path):
    from eagle3_quant.validate.kernel_check import run_kernel_check

    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": W6A6}))
    kernel = run_kernel_check(tmp_path, "cpu")
    assert kernel["status"] == "skipped" and kernel["mx"] and "MXFP6 E2M3 artifact" in kernel["reason"]
