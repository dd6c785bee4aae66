"""The kernel-path check: CPU numerics, evidence rules, the prepared GPU script."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from eagle3_quant.validate.kernel_check import judge, kernel_checks, log_evidence, run_kernel_check
from eagle3_quant.validate.platform import detect_platform

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
    evidence = log_evidence(ROCM_LOG)
    assert evidence["hipblaslt_matmul_lines"] == 2 and evidence["rocblas_gemm_lines"] == 0
    kernels = {"Cijk_Alik_Bljk_F8F8BS_BH_MT64x64": 7, "quant_kernel": 7}
    assert judge("rocm", evidence, kernels, True)[:1] == ("passed",)
    # Tensile kernel names alone prove nothing: without hipBLASLt log lines the check fails
    assert judge("rocm", log_evidence([]), kernels, True)[0] == "failed"
    fallback = log_evidence([*ROCM_LOG, "rocblas_gemm_ex(handle, N, T, 64, 128, 256)"])
    assert judge("rocm", fallback, kernels, True)[0] == "failed"
    assert judge("rocm", evidence, kernels, False)[0] == "failed"
    assert judge("cuda", log_evidence([]), {"vectorized_elementwise_kernel": 3}, True)[0] == "failed"
    status, _, backend = judge("cuda", log_evidence([]), {"void cutlass::device_kernel<f8f8bf16_rowwise>": 7}, True)
    assert status == "passed" and backend.startswith("CUTLASS")


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
