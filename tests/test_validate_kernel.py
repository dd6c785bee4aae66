"""The kernel-path check: CPU numerics, evidence rules, the prepared GPU script."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3_quant.cli.render_validate import kernel_lines
from eagle3_quant.validate.blas_log_lines import parse_cublaslt
from eagle3_quant.validate.gemm_forms import SCHEME_GEMMS
from eagle3_quant.validate.kernel_check import kernel_checks, run_kernel_check
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_judgement import judge
from eagle3_quant.validate.kernel_names import fp8_by_name, kernel_family
from eagle3_quant.validate.platform import Platform, detect_platform

H200 = json.loads((Path(__file__).parent / "fixtures/h200/kernel_evidence.json").read_text())
H200_GEMM = "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"
H200_BF16_GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"     # nvjet without the FP8 type code qq
OLD_WRONG_REASON = "the profiler saw no GEMM kernel during the FP8 linears"
ROWWISE, TENSORWISE = SCHEME_GEMMS["ptpc_fp8"], SCHEME_GEMMS["fp8"]
MI355X = Platform("rocm", "cuda:0", "AMD Instinct MI355X", "gfx950", "2.9", "7.0")


def test_cpu_platform_and_numerics_are_bit_exact(quantized_tiny):
    if torch.cuda.is_available():
        pytest.skip("this test checks the CPU path; the GPU path has its own test")
    _, out = quantized_tiny()
    platform = detect_platform()
    assert platform.kind == "cpu" and not platform.needs_fnuz and platform.model is None
    kernel = run_kernel_check(out)
    assert kernel["status"] == "skipped" and "GPU" in kernel["reason"]
    assert {r["module"] for r in kernel["numerics"]} >= {"midlayer.self_attn.q_proj", "midlayer.mlp.down_proj"}
    assert all(r["bit_exact"] and r["ok"] for r in kernel["numerics"])
    checks = {c.name: c.status for c in kernel_checks(kernel)}
    assert checks == {"kernel_numerics": "passed", "kernel_path": "skipped", "mi355x_hipblaslt": "skipped"}


def test_kernel_names_decide_only_when_no_blas_log_was_written():
    assert judge(ROWWISE, KernelEvidence.read([], {"vectorized_elementwise_kernel": 3}), True)[0] == "failed"
    status, reason, backend = judge(ROWWISE, KernelEvidence.read([], {"void cutlass::device_kernel<f8f8bf16_rowwise>":
                                                                      7}), True)
    assert (status, backend) == ("passed", "CUTLASS (ATen rowwise)") and "E4M3 x E4M3 -> BF16, rowwise" in reason
    status, reason, backend = judge(ROWWISE, KernelEvidence.read([], {H200_GEMM: 7}), True)
    assert (status, backend) == ("passed", "cuBLASLt") and "no matmul line in the BLAS logs" in reason


@pytest.mark.parametrize("run", sorted(H200))
def test_the_h200s_recorded_cublaslt_path_passes_as_rowwise_e4m3(run):
    recorded = H200[run]
    assert recorded["recorded"] == {"status": "failed", "reason": OLD_WRONG_REASON}
    evidence = KernelEvidence.read(recorded["log_sample"], recorded["kernel_counts"])
    assert [c.library for c in evidence.cublaslt] == ["cuBLASLt"] * len(recorded["log_sample"])
    assert {(c.a_type, c.b_type, c.out_type, c.scale_mode) for c in evidence.cublaslt} == {
        ("E4M3", "E4M3", "BF16", "rowwise")}
    assert evidence.gemm_families == evidence.fp8_gemm_families == {"nvjet_sm90": 7}
    assert evidence.other_kernels == 70      # the per-token quantization: abs, amax, clamp, reciprocal, casts
    status, reason, backend = judge(ROWWISE.on(recorded["platform"]["arch"]), evidence, True)
    assert (status, backend) == ("passed", "cuBLASLt")
    assert reason == f"cuBLASLt ran {len(recorded['log_sample'])} matmuls (E4M3 x E4M3 -> BF16, rowwise fp32 " \
                     "scales); GEMM kernels: nvjet_sm90 x7; other kernels: 70"
    record = evidence.to_dict()
    assert {k: record[k] for k in ("library", "operand_types", "output_type", "scale_mode", "fp8_matmul_calls")} \
        == {"library": "cuBLASLt", "operand_types": ["E4M3", "E4M3"], "output_type": "BF16", "scale_mode": "rowwise",
            "fp8_matmul_calls": len(recorded["log_sample"])}
    assert json.loads(json.dumps(record)) == record
    # a static per-tensor artifact passes scalar scales: rowwise calls do not prove its path
    status, reason, _ = judge(TENSORWISE, evidence, True)
    assert status == "failed" and "with rowwise fp32 scales; this artifact's linears pass one fp32 scale per " \
                                  "tensor" in reason


@pytest.mark.parametrize("run", sorted(H200))
def test_the_old_wrong_judgement_cannot_come_back(run):
    """The H200's own kernel names, without any log line: nvjet_sm90 is cuBLASLt's FP8 GEMM, not "no GEMM"."""
    counts = H200[run]["kernel_counts"]
    status, reason, backend = judge(ROWWISE, KernelEvidence.read([], counts, "CUBLASLT_LOG_LEVEL=2"), True)
    assert (status, backend) == ("passed", "cuBLASLt") and "no GEMM" not in reason
    assert reason.startswith("no matmul line in the BLAS logs (CUBLASLT_LOG_LEVEL=2); the kernel names show cuBLASLt "
                             "ran 7 GEMM launches") and "nvjet_sm90 x7" in reason
    assert "the scale mode is not shown: no kernel name shows one" in reason and "rowwise" not in reason
    # with every log line the run wrote (35), the count in the reason is the log's
    lines = (H200[run]["log_sample"] * 12)[:H200[run]["cublaslt_matmul_lines"]]
    assert judge(ROWWISE, KernelEvidence.read(lines, counts), True)[1].startswith("cuBLASLt ran 35 matmuls (")


def test_e5m2_operands_fail_the_e4m3_artifact():
    e5m2 = [line.replace("R_8F_E4M3", "R_8F_E5M2") for line in H200["kimi-k2.5"]["log_sample"]]
    status, reason, _ = judge(ROWWISE, KernelEvidence.read(e5m2, {H200_GEMM: 7}), True)
    assert status == "failed" and "3 of them E5M2 x E5M2 -> BF16, rowwise fp32 scales" in reason


def test_without_a_log_only_an_fp8_gemm_name_passes():
    status, reason, _ = judge(ROWWISE, KernelEvidence.read([], {H200_BF16_GEMM: 7, "reduce_kernel": 7}), True)
    assert status == "failed" and "7 of them non-FP8 x non-FP8" in reason and "GEMM kernels: nvjet_sm90 x7" in reason
    assert not fp8_by_name(H200_BF16_GEMM) and fp8_by_name(H200_GEMM) and fp8_by_name("nvjet_qqhsh_64x8_TNT")
    assert fp8_by_name("void cutlass::device_kernel<GemmUniversal<cutlass::float_e4m3_t, bfloat16_t>>")
    assert fp8_by_name("sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64")
    assert fp8_by_name("Cijk_Alik_Bljk_F8BS_BH_MT64x64") and not fp8_by_name("Cijk_Ailk_Bljk_BBS_BH_MT64x64")
    assert not fp8_by_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn")
    assert judge(ROWWISE, KernelEvidence.read([], {H200_GEMM: 7}), False)[0] == "failed"   # numerics decide first


def test_only_matmul_lines_count_as_cublaslt_calls():
    line = H200["kimi-k2.5"]["log_sample"][0]
    heuristic = line.replace("[cublasLtMatmul]", "[cublasLtMatmulAlgoGetHeuristic]")
    assert len(KernelEvidence.read([line, heuristic], {}).cublaslt) == 1


def test_cublaslt_scale_modes_as_the_log_spells_them():
    line = H200["kimi-k2.5"]["log_sample"][0]
    assert parse_cublaslt(line.replace(" aScaleMode=OUTER_VEC_32F bScaleMode=OUTER_VEC_32F", "")).scale_mode == \
        "tensorwise"                                   # scale pointers and no mode: one scale per tensor
    assert parse_cublaslt(line.replace("OUTER_VEC_32F", "SCALAR_32F")).scale_mode == "tensorwise"
    assert parse_cublaslt(line.replace("OUTER_VEC_32F", "VEC32_UE8M0")).scale_mode == "block32_ue8m0"
    assert parse_cublaslt(line.replace("bScaleMode=OUTER_VEC_32F", "bScaleMode=SCALAR_32F")).scale_mode == \
        "A rowwise / B tensorwise"


def test_on_an_mi355x_the_child_logs_into_files_the_check_owns(quantized_tiny, monkeypatch):
    """run_kernel_check's GPU path with the device faked (no GPU here): the logged child gets hipBLASLt's mask, not
    a level, and its file; the lines it writes there (hipBLASLt's format, tests/fixtures/rocm) decide; the numerics
    and timing come from the child without logging."""
    _, out = quantized_tiny()
    spec = importlib.util.spec_from_file_location("vendor_lines", Path(__file__).parent / "fixtures/rocm/"
                                                  "vendor_lines.py")
    lines = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lines)
    seen = {}

    def child(out, device, phase, env, workdir):
        seen[phase] = env
        if phase == "evidence":            # as hipBLASLt's open_log_stream: %i -> the pid; a level: no bench line
            bench = [] if "HIPBLASLT_LOG_LEVEL" in os.environ else [lines.hipblaslt_bench(2)]
            Path(env["HIPBLASLT_LOG_FILE"].replace("%i", "4242")).write_text(
                "\n".join(lines.calls(lines.hipblaslt_trace("R_8F_E4M3"), *bench)) + "\n")
            return {"kernels": {lines.GFX950_F8_ROWWISE: 14}, "scale_mode": "rowwise", "output": ""}
        return {"numerics": [{"module": "m", "rows": 1, "format": "e4m3fn", "max_rel_error": 1e-3, "bit_exact": False,
                              "tolerance": 1e-2, "ok": True}], "timing": None, "timing_error": "not timed here"}

    monkeypatch.delenv("HIPBLASLT_LOG_LEVEL", raising=False)
    monkeypatch.delenv("HIPBLASLT_LOG_MASK", raising=False)
    monkeypatch.setattr("eagle3_quant.validate.platform.detect_platform", lambda device=None: MI355X)
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", child)
    kernel = run_kernel_check(out)
    assert seen["evidence"]["HIPBLASLT_LOG_MASK"] == "35" and "HIPBLASLT_LOG_LEVEL" not in seen["evidence"]
    assert seen["measure"] == {}
    assert (kernel["status"], kernel["backend"]) == ("passed", "hipBLASLt"), kernel["reason"]
    assert kernel["expected"] == {"element": "E4M3", "scale_mode": "rowwise", "out_type": "BF16",
                                  "scheme": "ptpc_fp8", "input_element": None}
    assert kernel["log_evidence"]["matmul_calls"] == 14 and kernel["timing_skipped"] == "not timed here"
    checks = {c.name: c.status for c in kernel_checks(kernel)}
    assert checks == {"kernel_numerics": "passed", "kernel_path": "passed", "mi355x_hipblaslt": "passed"}
    # a level the user set is kept (hipBLASLt then ignores the mask: no bench line) and said in the reason
    monkeypatch.setenv("HIPBLASLT_LOG_LEVEL", "2")
    kernel = run_kernel_check(out)
    assert "HIPBLASLT_LOG_MASK" not in seen["evidence"] and kernel["status"] == "passed"
    assert "rowwise fp32 scales, scale mode from the kernel names" in kernel["reason"]
    assert kernel["reason"].endswith("HIPBLASLT_LOG_LEVEL=2 is set in your environment and kept: hipBLASLt then "
                                     "ignores HIPBLASLT_LOG_MASK and logs trace lines but no bench line, so no scale "
                                     "mode")


def test_the_printed_kernel_line_is_short_and_the_json_keeps_every_name():
    counts = H200["real-pair-validate"]["kernel_counts"]
    line = KernelEvidence.read([], counts).describe_kernels()
    assert line == "GEMM kernels: nvjet_sm90 x7; other kernels: 70"
    assert kernel_family("void at::native::reduce_kernel<512, 1>") is None
    assert kernel_family("Cijk_Ailk_Bljk_F8BS") == "Cijk" and kernel_family(H200_GEMM) == "nvjet_sm90"
    assert kernel_family("nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT") == "nvjet"
    # what `validate` prints under its table: one short line, no C++ template names (they stay in validation.json)
    assert kernel_lines({"kernel_counts": counts, "kernels": sorted(counts)}) == [
        "kernels by family (full names in validation.json): GEMM kernels: nvjet_sm90 x7; other kernels: 70"]
    assert kernel_lines({"kernels": []}) == []


def test_prepared_script_runs_and_reports(quantized_tiny, tmp_path):
    _, out = quantized_tiny()
    result = tmp_path / "kernel.json"
    done = subprocess.run([sys.executable, "-m", "eagle3_quant.validate.kernel_check", str(out), "--json",
                           str(result)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    kernel = json.loads(result.read_text())
    assert "kernel_numerics" in done.stdout and kernel["numerics"]
    if not torch.cuda.is_available():
        assert kernel["status"] == "skipped" and "skipped  kernel_path" in done.stdout


@pytest.mark.gpu
def test_gpu_kernel_path(quantized_tiny):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm device: the FP8 GEMM kernel path cannot run on a CPU")
    _, out = quantized_tiny()
    kernel = run_kernel_check(out)
    assert kernel["status"] == "passed", kernel["reason"]
    assert kernel["kernels"] and all(r["ok"] for r in kernel["numerics"])
    assert kernel["timing"]["batch_sizes"] == [1, 2, 4, 8, 16, 32, 64]
