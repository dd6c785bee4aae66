"""The serving child's CPU stand-ins (eagle3_quant/engines/vllm/serve_cpu.py), run here on torch alone: the fp32 GEMM
that replaces torch's slow CPU ``_scaled_mm`` gives torch's own result for every scale layout vLLM's FP8 kernels pass,
checks itself against it on its first calls, and leaves every other call to torch."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from eagle3_quant.engines.environment import VLLM_CHILDREN
from eagle3_quant.runtime.fp8 import cpu_rowwise_scaled_mm


@pytest.fixture
def serve_cpu(monkeypatch):
    spec = importlib.util.spec_from_file_location("serve_cpu_under_test", VLLM_CHILDREN / "serve_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(torch, "_scaled_mm", torch._scaled_mm)    # restored after the test
    monkeypatch.delenv(module.SCALED_MM_ENV, raising=False)
    return module


def operands(m: int = 12, k: int = 64, n: int = 48, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) * 40).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, generator=gen) * 40).clamp(-448, 448).to(torch.float8_e4m3fn).t()   # column-major
    return a, b, torch.rand(m, 1, generator=gen) + 0.01, torch.rand(1, n, generator=gen) + 0.01


# torch 2.11 and older: the CPU op takes two scalar scales only, so there is no rowwise op to compare with
NEEDS_CPU_ROWWISE = pytest.mark.skipif(not cpu_rowwise_scaled_mm(), reason=f"torch {torch.__version__}'s CPU "
                                       "_scaled_mm takes no rowwise scales: nothing to compare the stand-in with")


@pytest.mark.parametrize("layout", ["per-tensor", pytest.param("per-token x per-channel", marks=NEEDS_CPU_ROWWISE),
                                    "unit scales, fp32 out"])
def test_the_fp32_gemm_gives_torchs_own_scaled_mm(serve_cpu, layout):
    original = torch._scaled_mm
    a, b, per_token, per_channel = operands()
    scales = {"per-tensor": (per_token[:1, 0], per_channel[0, :1], torch.bfloat16),
              "per-token x per-channel": (per_token, per_channel, torch.bfloat16),
              "unit scales, fp32 out": (torch.ones(1), torch.ones(1), torch.float32)}[layout]
    scale_a, scale_b, out_dtype = scales
    expected = original(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    serve_cpu.fast_cpu_scaled_mm()
    assert torch._scaled_mm is not original
    got = torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=float(expected.float().abs().max()) * 1e-6)
    row = serve_cpu.substituted_ops()["torch._scaled_mm"]
    assert row["calls"] == 1 and row["compared_calls"] == 1 and row["max_abs_diff"] < 1e-2


@NEEDS_CPU_ROWWISE
def test_each_weight_is_compared_on_its_first_calls_only(serve_cpu):
    serve_cpu.fast_cpu_scaled_mm()
    a, b, per_token, per_channel = operands()
    for _ in range(serve_cpu.COMPARED_CALLS + 3):
        torch._scaled_mm(a, b, scale_a=per_token, scale_b=per_channel, out_dtype=torch.bfloat16)
    row = serve_cpu.substituted_ops()["torch._scaled_mm"]
    assert row["calls"] == serve_cpu.COMPARED_CALLS + 3 and row["compared_calls"] == serve_cpu.COMPARED_CALLS


def test_bias_is_added_before_the_cast(serve_cpu):
    original = torch._scaled_mm
    a, b, per_token, per_channel = operands()
    bias = torch.randn(b.shape[1]).to(torch.bfloat16)
    expected = original(a, b, scale_a=per_token[:1, 0], scale_b=per_channel[0, :1], bias=bias,
                        out_dtype=torch.bfloat16)
    serve_cpu.fast_cpu_scaled_mm()
    got = torch._scaled_mm(a, b, scale_a=per_token[:1, 0], scale_b=per_channel[0, :1], bias=bias,
                           out_dtype=torch.bfloat16)
    torch.testing.assert_close(got.float(), expected.float(), rtol=1e-2, atol=1e-2)


def test_other_calls_are_torchs_own_and_reference_keeps_torchs_op(serve_cpu, monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "_scaled_mm", lambda *args, **kwargs: seen.append(kwargs) or "torch's own")
    serve_cpu.fast_cpu_scaled_mm()
    x = torch.ones(4, 8)
    assert torch._scaled_mm(x, x.t(), scale_a=torch.ones(1), scale_b=torch.ones(1)) == "torch's own"   # not FP8
    assert "torch._scaled_mm" in serve_cpu.SUPPLIED and serve_cpu.substituted_ops()["torch._scaled_mm"]["calls"] == 0
    monkeypatch.setattr(torch, "_scaled_mm", "untouched")
    monkeypatch.setenv(serve_cpu.SCALED_MM_ENV, "reference")
    serve_cpu.SUPPLIED.clear()
    serve_cpu.fast_cpu_scaled_mm()
    assert torch._scaled_mm == "untouched" and not serve_cpu.SUPPLIED
