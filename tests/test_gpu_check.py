"""`make gpu-check` (benchmarks/gpu_check.py): on a CPU every GPU part says `skipped` with its reason, never
`passed`; the pieces it is built from read what pytest and the artifact say."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import gpu_check

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_runtime_gpu" name="test_a[1]"/>
<testcase classname="tests.test_runtime_gpu" name="test_b"><failure message="boom"/></testcase>
<testcase classname="tests.test_calib_gpu" name="test_c"><skipped message="needs a GPU"/></testcase>
<testcase classname="tests.test_validate_kernel" name="test_d"><error message="fixture"/></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_count_failures_errors_and_skips():
    outcomes = gpu_check.junit_outcomes(JUNIT)
    assert outcomes["passed"] == ["tests.test_runtime_gpu::test_a[1]"]
    assert outcomes["failed"] == ["tests.test_runtime_gpu::test_b", "tests.test_validate_kernel::test_d"]
    assert outcomes["skipped"] == ["tests.test_calib_gpu::test_c"]


def test_the_table_names_every_part_with_its_status():
    parts = [gpu_check.Part("environment", "passed", "NVIDIA H200 (sm_90)", 0.1),
             gpu_check.Part("kernel:llama3-8b", "failed", "no FP8 GEMM", 12.0, {"table": ["qkv_proj 1.00x"]})]
    text = gpu_check.render(parts).splitlines()
    assert text[1].split()[:2] == ["environment", "passed"] and text[2].split()[:2] == ["kernel:llama3-8b", "failed"]
    assert text[-1] == "  kernel:llama3-8b: qkv_proj 1.00x"


def test_the_per_linear_lines_show_each_timed_column():
    timing = {"batch_sizes": [1, 64], "layers": [{"layer": "qkv_proj", "shape": [24576, 14336],
                                                  "bf16_ms": [0.183, 0.191], "fp8_ms": [0.177, 0.145],
                                                  "gemm_only_ms": [0.170, 0.140]}]}
    assert gpu_check.layer_lines(timing) == ["per linear, ms at 1/64 rows:", "  qkv_proj 24576x14336: BF16 "
                                             "0.183/0.191; quant+GEMM 0.177/0.145; GEMM 0.170/0.140"]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU run; on a GPU `make gpu-check` is the run")
def test_on_a_cpu_every_gpu_part_is_skipped_with_its_reason(tmp_path):
    record = tmp_path / "gpu-check.json"
    assert gpu_check.main(["--json", str(record)]) == 0
    parts = {p["name"]: p for p in json.loads(record.read_text())["parts"]}
    assert set(parts) == {"environment", "gpu_tests", "same_bytes", "kernel:llama3-8b", "step:llama3-8b",
                          "kernel:kimi-k2.5", "step:kimi-k2.5"}
    assert {p["status"] for p in parts.values()} == {"skipped"}
    assert all(p["detail"] for p in parts.values())
    outcomes = parts["gpu_tests"]["data"]["outcomes"]
    assert outcomes["passed"] == [] and outcomes["failed"] == [] and outcomes["skipped"]
    assert set(parts["same_bytes"]["data"]["cpu"]) >= {"model.safetensors", "config.json"}
    assert parts["environment"]["data"]["install"] in ("editable", "regular", "checkout only")
