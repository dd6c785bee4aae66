"""The runtime's rounding points are vLLM 0.33's (vLLM's own forward is compared in test_vllm_load.py)."""

from __future__ import annotations

import math

import torch
from torch import nn

from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.attention import CausalContext
from eagle3_quant.runtime.fp8_linear import Fp8Linear, quantize_linear
from eagle3_quant.runtime.model import MLP, RMSNorm

HIDDEN, TOKENS, EPS = 64, 8, 1e-5


def test_fused_add_norm_normalizes_the_unrounded_fp32_sum():
    """vLLM's fused_add_rms_norm: fp32 sum, normalized unrounded; the residual is the sum rounded."""
    gen = torch.Generator().manual_seed(0)
    x, residual = (torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16() * 3 for _ in range(2))
    norm = RMSNorm(HIDDEN, EPS, torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(HIDDEN, generator=gen) + 0.5)
    out, new_residual = norm(x, residual)
    total = x.float() + residual.float()
    expected = ((total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16() * norm.weight)
    assert torch.equal(new_residual, total.bfloat16())
    assert torch.equal(out, expected)
    rounded_first = norm(total.bfloat16())              # what the runtime did before: norm of the rounded sum
    assert not torch.equal(out, rounded_first)


def test_attention_scores_are_fp32():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, TOKENS, 16, generator=gen).bfloat16() * 4 for _ in range(3))
    got = CausalContext().attend(q, k, v)
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(16)
    scores = scores.masked_fill(~torch.ones(TOKENS, TOKENS, dtype=torch.bool).tril(), float("-inf"))
    assert torch.equal(got, torch.softmax(scores, -1).bfloat16() @ v)


def test_fp8_linear_returns_the_drafts_dtype_and_fp16_takes_the_channelwise_path():
    gen = torch.Generator().manual_seed(2)
    layer = quantize_linear(nn.Linear(HIDDEN, 32, bias=False).requires_grad_(False))
    x16 = torch.randn(TOKENS, HIDDEN, generator=gen).half()
    out16 = layer(x16)
    a, scale_a = fp8.quantize_per_token(x16)
    one = torch.ones(())
    unscaled = torch._scaled_mm(a, layer.weight.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
    assert out16.dtype == torch.float16
    assert torch.equal(out16, (unscaled * scale_a * layer.weight_scale.reshape(1, -1)).half())
    assert layer(x16.bfloat16()).dtype == torch.bfloat16


def test_static_down_proj_quantizes_the_unrounded_silu_product():
    """vLLM fuses SiLU-mul with a static FP8 input quantization (silu_and_mul_quant): no bf16 rounding."""
    gen = torch.Generator().manual_seed(3)
    mlp = MLP(HIDDEN, 96, False, torch.bfloat16).requires_grad_(False)
    for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * 0.1)
    mlp.down_proj = quantize_linear(mlp.down_proj, per_channel=False, input_scale=torch.tensor([0.01]))
    x = torch.randn(TOKENS, HIDDEN, generator=gen).bfloat16()
    gate, up = mlp.gate_proj(x), mlp.up_proj(x)
    product = nn.functional.silu(gate.float()) * up.float()
    assert isinstance(mlp.down_proj, Fp8Linear)
    assert torch.equal(mlp(x), mlp.down_proj(product, out_dtype=torch.bfloat16))
    assert mlp(x).dtype == torch.bfloat16
