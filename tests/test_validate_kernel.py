"""The kernel-path check: CPU numerics, evidence rules, the prepared GPU script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3_quant.cli.render_validate import kernel_lines
from eagle3_quant.validate.kernel_check import judge, kernel_checks, run_kernel_check
from eagle3_quant.validate.kernel_evidence import (
    KernelEvidence,
    fp8_by_name,
    kernel_family,
    parse_cublaslt,
    parse_hipblaslt,
)
from eagle3_quant.validate.platform import detect_platform

H200 = json.loads((Path(__file__).parent / "fixtures/h200/kernel_evidence.json").read_text())
H200_GEMM = "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"
H200_BF16_GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"     # cuBLASLt's BF16 kernel on Hopper
OLD_WRONG_REASON = "the profiler saw no GEMM kernel during the FP8 linears"
# hipBLASLt's own formats (hipBLASLt utility.cpp / tensile_host.cpp): the level-2 trace line (operand types, no
# scale mode) and the bench line (log mask 32; --scaleA/B: 1 scalar, 2 vector = rowwise, 3 block)
ROCM_TRACE = ("[2026-12-04 10:00:00][HIPBLASLT][4242][trace][rocblaslt_matmul] A=0x7f00 Adesc=[type=R_8F_E4M3 "
              "rows=256 cols=64 ld=256] B=0x7f01 Bdesc=[type=R_8F_E4M3 rows=256 cols=128 ld=256] C=0x7f02 "
              "Cdesc=[type=R_16BF rows=64 cols=128 ld=64] D=0x7f02 Ddesc=[type=R_16BF rows=64 cols=128 ld=64] "
              "computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transA=OP_T transB=OP_N epilogue=EPILOGUE_DEFAULT "
              "biasPointer=0x0] workSpace=0x0 workSpaceSizeInBytes=0 alpha=1 beta=0 stream=0x0")
ROCM_BENCH = ("hipblaslt-bench --api_method c -m 64 -n 128 -k 256 --lda 256 --ldb 256 --ldc 64 --ldd 64 --alpha 1 "
              "--beta 0 --transA T --transB N --batch_count 1 --scaleA 2 --scaleB 2 --a_type f8_r --b_type f8_r "
              "--c_type bf16_r --d_type bf16_r --compute_type f32_r --algo_method index --solution_index 7")
ROCM_LOG = [ROCM_TRACE, ROCM_BENCH]


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


def test_hipblaslt_evidence_rules():
    kernels = {"Cijk_Alik_Bljk_F8F8BS_BH_MT64x64": 7, "quant_kernel": 7}
    evidence = KernelEvidence.read(ROCM_LOG, kernels)
    assert evidence.hipblaslt_lines == 2 and evidence.rocblas_gemm_lines == 0 and evidence.library == "hipBLASLt"
    status, reason, backend = judge("rocm", evidence, True)
    assert (status, backend) == ("passed", "hipBLASLt")
    assert "E4M3 x E4M3 -> BF16, rowwise fp32 scales" in reason and "Cijk x7" in reason
    # Tensile kernel names alone prove nothing: without hipBLASLt log lines the check fails
    assert judge("rocm", KernelEvidence.read([], kernels), True)[0] == "failed"
    fallback = KernelEvidence.read([*ROCM_LOG, "rocblas_gemm_ex(handle, N, T, 64, 128, 256)"], kernels)
    assert judge("rocm", fallback, True)[0] == "failed"
    assert judge("rocm", evidence, False)[0] == "failed"
    # the level-2 trace alone (no bench line): still hipBLASLt, operand types read, scale mode not in that log
    status, reason, _ = judge("rocm", KernelEvidence.read([ROCM_TRACE], kernels), True)
    assert status == "passed" and "E4M3 x E4M3 -> BF16, scale mode not logged" in reason


@pytest.mark.parametrize(("flags", "mode"), [("--scaleA 1 --scaleB 1", "tensorwise"), ("--scaleA 2 --scaleB 2",
                         "rowwise"), ("--scaleA 3 --scaleB 3", "block"), ("--scaleA v --scaleB v", "rowwise"),
                                             ("--scaleA 2 --scaleB 1", "A rowwise / B tensorwise"), ("", "none")])
def test_hipblaslt_bench_scale_codes(flags, mode):
    call = parse_hipblaslt(ROCM_BENCH.replace("--scaleA 2 --scaleB 2", flags))
    assert (call.library, call.a_type, call.b_type, call.out_type, call.scale_mode) == (
        "hipBLASLt", "E4M3", "E4M3", "BF16", mode)


def test_kernel_names_decide_only_when_no_blas_log_was_written():
    assert judge("cuda", KernelEvidence.read([], {"vectorized_elementwise_kernel": 3}), True)[0] == "failed"
    status, _, backend = judge("cuda", KernelEvidence.read([], {"void cutlass::device_kernel<f8f8bf16_rowwise>": 7}),
                               True)
    assert status == "passed" and backend.startswith("CUTLASS")
    status, reason, backend = judge("cuda", KernelEvidence.read([], {H200_GEMM: 7}), True)
    assert (status, backend) == ("passed", "cuBLASLt") and "no cuBLASLt log line" in reason


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
    status, reason, backend = judge("cuda", evidence, True)
    assert (status, backend) == ("passed", "cuBLASLt")
    assert reason == f"cuBLASLt ran {len(recorded['log_sample'])} FP8 matmuls (E4M3 x E4M3 -> BF16, rowwise fp32 " \
                     "scales); GEMM kernels: nvjet_sm90 x7; other kernels: 70"
    record = evidence.to_dict()
    assert {k: record[k] for k in ("library", "operand_types", "output_type", "scale_mode", "fp8_matmul_calls")} \
        == {"library": "cuBLASLt", "operand_types": ["E4M3", "E4M3"], "output_type": "BF16", "scale_mode": "rowwise",
            "fp8_matmul_calls": len(recorded["log_sample"])}
    assert json.loads(json.dumps(record)) == record
    # a static per-tensor artifact passes scalar scales: rowwise calls do not prove its path
    status, reason, _ = judge("cuda", evidence, True, scale_mode="tensorwise")
    assert status == "failed" and "with rowwise fp32 scales; this artifact's linears pass one fp32 scale per " \
                                  "tensor" in reason


@pytest.mark.parametrize("run", sorted(H200))
def test_the_old_wrong_judgement_cannot_come_back(run):
    """The H200's own kernel names, without any log line: nvjet_sm90 is cuBLASLt's FP8 GEMM, not "no GEMM"."""
    counts = H200[run]["kernel_counts"]
    status, reason, backend = judge("cuda", KernelEvidence.read([], counts), True)
    assert (status, backend) == ("passed", "cuBLASLt") and "no GEMM" not in reason
    assert "no cuBLASLt log line" in reason and "nvjet_sm90 x7" in reason
    # with every log line the run wrote (35), the count in the reason is the log's
    lines = (H200[run]["log_sample"] * 12)[:H200[run]["cublaslt_matmul_lines"]]
    assert judge("cuda", KernelEvidence.read(lines, counts), True)[1].startswith("cuBLASLt ran 35 FP8 matmuls (")


def test_a_cublaslt_log_of_bf16_matmuls_fails_even_beside_gemm_kernels():
    bf16 = [line.replace("R_8F_E4M3", "R_16BF") for line in H200["kimi-k2.5"]["log_sample"]]
    status, reason, _ = judge("cuda", KernelEvidence.read(bf16, {H200_GEMM: 7}), True)
    assert status == "failed" and "cuBLASLt ran 3 matmuls, none with FP8 operands (BF16 x BF16 -> BF16" in reason


def test_e5m2_operands_fail_the_e4m3_artifact():
    e5m2 = [line.replace("R_8F_E4M3", "R_8F_E5M2") for line in H200["kimi-k2.5"]["log_sample"]]
    status, reason, _ = judge("cuda", KernelEvidence.read(e5m2, {H200_GEMM: 7}), True)
    assert status == "failed" and "with E5M2 x E5M2 operands" in reason


def test_without_a_log_only_an_fp8_gemm_name_passes():
    status, reason, _ = judge("cuda", KernelEvidence.read([], {H200_BF16_GEMM: 7, "reduce_kernel": 7}), True)
    assert status == "failed" and reason.startswith("no FP8 GEMM in cuBLASLt's log (CUBLASLT_LOG_LEVEL=2) nor among "
                                                    "the profiler's kernels; GEMM kernels: nvjet_sm90 x7")
    assert not fp8_by_name(H200_BF16_GEMM) and fp8_by_name(H200_GEMM) and fp8_by_name("nvjet_qqhsh_64x8_TNT")
    assert fp8_by_name("void cutlass::device_kernel<GemmUniversal<cutlass::float_e4m3_t, bfloat16_t>>")
    assert fp8_by_name("sm89_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64")
    assert fp8_by_name("Cijk_Alik_Bljk_F8F8BS_BH_MT64x64") and not fp8_by_name("Cijk_Ailk_Bljk_BBS_BH_MT64x64")
    assert not fp8_by_name("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn")


def test_only_matmul_lines_count_as_cublaslt_calls():
    line = H200["kimi-k2.5"]["log_sample"][0]
    heuristic = line.replace("[cublasLtMatmul]", "[cublasLtMatmulAlgoGetHeuristic]")
    assert len(KernelEvidence.read([line, heuristic], {}).cublaslt) == 1


def test_a_tensorwise_cublaslt_call_reads_as_one_scale_per_tensor():
    line = H200["kimi-k2.5"]["log_sample"][0].replace(" aScaleMode=OUTER_VEC_32F bScaleMode=OUTER_VEC_32F", "")
    call = parse_cublaslt(line)
    assert call.fp8 and call.scale_mode == "tensorwise"
    assert judge("cuda", KernelEvidence.read([line], {H200_GEMM: 1}), True, scale_mode="tensorwise")[0] == "passed"
    scalar = H200["kimi-k2.5"]["log_sample"][0].replace("OUTER_VEC_32F", "SCALAR_32F")
    assert parse_cublaslt(scalar).scale_mode == "tensorwise"
    assert parse_cublaslt(H200["kimi-k2.5"]["log_sample"][0].replace("bScaleMode=OUTER_VEC_32F",
                                                                     "bScaleMode=SCALAR_32F")).scale_mode \
        == "A rowwise / B tensorwise"


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
