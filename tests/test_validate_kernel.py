"""The kernel-path check: CPU numerics, evidence rules, the prepared GPU script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3_quant.validate.kernel_check import judge, kernel_checks, run_kernel_check
from eagle3_quant.validate.kernel_evidence import KernelEvidence, kernel_family, parse_cublaslt
from eagle3_quant.validate.platform import detect_platform

H200 = json.loads((Path(__file__).parent / "fixtures/h200/kernel_evidence.json").read_text())
H200_GEMM = "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"
ROCM_LOG = [
    "hipblaslt-bench --api_method c -m 64 -n 128 -k 256 --a_type f8_r --b_type f8_r --scaleA 3 --scaleB 3",
    "[hipblaslt] rocblaslt_matmul: handle=0x1 transA=T transB=N m=64 n=128 k=256",
]


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
    assert evidence.hipblaslt_lines == 2 and evidence.rocblas_gemm_lines == 0
    status, reason, backend = judge("rocm", evidence, True)
    assert (status, backend) == ("passed", "hipBLASLt")
    assert "E4M3 x E4M3" in reason and "scaleA=3 scaleB=3" in reason and "Cijk x7" in reason
    # Tensile kernel names alone prove nothing: without hipBLASLt log lines the check fails
    assert judge("rocm", KernelEvidence.read([], kernels), True)[0] == "failed"
    fallback = KernelEvidence.read([*ROCM_LOG, "rocblas_gemm_ex(handle, N, T, 64, 128, 256)"], kernels)
    assert judge("rocm", fallback, True)[0] == "failed"
    assert judge("rocm", evidence, False)[0] == "failed"


def test_kernel_names_decide_only_when_no_blas_log_was_written():
    assert judge("cuda", KernelEvidence.read([], {"vectorized_elementwise_kernel": 3}), True)[0] == "failed"
    status, _, backend = judge("cuda", KernelEvidence.read([], {"void cutlass::device_kernel<f8f8bf16_rowwise>": 7}),
                               True)
    assert status == "passed" and backend.startswith("CUTLASS")
    status, reason, backend = judge("cuda", KernelEvidence.read([], {H200_GEMM: 7}), True)
    assert (status, backend) == ("passed", "cuBLASLt") and "no cuBLASLt log line" in reason


@pytest.mark.parametrize("shape", ["kimi-k2.5", "llama3-8b"])
def test_the_h200s_recorded_cublaslt_path_passes_as_rowwise_e4m3(shape):
    recorded = H200[shape]
    assert recorded["recorded"] == {"status": "failed",
                                    "reason": "the profiler saw no GEMM kernel during the FP8 linears"}
    evidence = KernelEvidence.read(recorded["log_sample"], recorded["kernel_counts"])
    assert [c.library for c in evidence.cublaslt] == ["cuBLASLt"] * len(recorded["log_sample"])
    assert {(c.a_type, c.b_type, c.out_type, c.scale_mode) for c in evidence.cublaslt} == {
        ("E4M3", "E4M3", "BF16", "rowwise")}
    assert evidence.gemm_families == {"nvjet_sm90": 7} and evidence.other_kernels > 0
    status, reason, backend = judge("cuda", evidence, True)
    assert (status, backend) == ("passed", "cuBLASLt")
    assert reason == f"cuBLASLt ran {len(recorded['log_sample'])} FP8 matmuls (E4M3 x E4M3 -> BF16, rowwise fp32 " \
                     f"scales); GEMM kernels: nvjet_sm90 x7; other kernels: {evidence.other_kernels}"
    # a static per-tensor artifact passes scalar scales: rowwise calls do not prove its path
    assert judge("cuda", evidence, True, scale_mode="tensorwise")[0] == "failed"


def test_a_cublaslt_log_of_bf16_matmuls_fails_even_beside_gemm_kernels():
    bf16 = [line.replace("R_8F_E4M3", "R_16BF") for line in H200["kimi-k2.5"]["log_sample"]]
    status, reason, _ = judge("cuda", KernelEvidence.read(bf16, {H200_GEMM: 7}), True)
    assert status == "failed" and "none with FP8 operands (BF16 x BF16 -> BF16" in reason


def test_a_tensorwise_cublaslt_call_reads_as_one_scale_per_tensor():
    line = H200["kimi-k2.5"]["log_sample"][0].replace(" aScaleMode=OUTER_VEC_32F bScaleMode=OUTER_VEC_32F", "")
    call = parse_cublaslt(line)
    assert call.fp8 and call.scale_mode == "tensorwise"
    assert judge("cuda", KernelEvidence.read([line], {H200_GEMM: 1}), True, scale_mode="tensorwise")[0] == "passed"


def test_the_printed_kernel_line_is_short_and_the_json_keeps_every_name():
    counts = H200["kimi-k2.5"]["kernel_counts"]
    line = KernelEvidence.read([], counts).describe_kernels()
    assert line.startswith("GEMM kernels: nvjet_sm90 x7; other kernels: ") and len(line) < 80
    assert kernel_family("void at::native::reduce_kernel<512, 1>") is None
    assert kernel_family("Cijk_Ailk_Bljk_F8BS") == "Cijk" and kernel_family(H200_GEMM) == "nvjet_sm90"


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
