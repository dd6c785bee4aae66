"""The runtime's rounding points are vLLM 0.33's (vLLM's own forward is compared in test_vllm_load.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.attention import CausalContext
from eagle3_quant.runtime.fp8_linear import harmonize_fused, quantize_linear
from eagle3_quant.runtime.model import MLP, RMSNorm
from eagle3_quant.runtime.serving import serving_numerics, silu_and_mul_quant

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


def _static_mlp(dtype: torch.dtype, seed: int) -> MLP:
    gen = torch.Generator().manual_seed(seed)
    mlp = MLP(HIDDEN, 96, False, dtype).requires_grad_(False)
    for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * 0.3)
    mlp.down_proj = quantize_linear(mlp.down_proj, per_channel=False, input_scale=torch.tensor([0.004]))
    return mlp


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_static_down_proj_input_is_vllms_fused_silu_and_mul_quant_bit_for_bit(dtype):
    """vLLM fuses SiLU-mul with down_proj's static FP8 input quantization (_C.silu_and_mul_quant); its kernel
    rounds SiLU and the product to the model dtype before x * (1 / scale): the runtime's FP8 input is that."""
    mlp = _static_mlp(dtype, 3)
    x = (torch.randn(4 * TOKENS, HIDDEN, generator=torch.Generator().manual_seed(4)) * 4).to(dtype)
    seen = []
    mlp.down_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    mlp(x)
    runtime_fp8, _ = fp8.quantize_static(seen[0], mlp.down_proj.input_scale)
    fused = silu_and_mul_quant(torch.cat([mlp.gate_proj(x), mlp.up_proj(x)], dim=-1), mlp.down_proj.input_scale)
    assert torch.equal(runtime_fp8.view(torch.uint8), fused.view(torch.uint8))
    # the fp32 product this runtime used to quantize lands on other FP8 codes: the comparison can tell them apart
    gate, up = mlp.gate_proj(x).float(), mlp.up_proj(x).float()
    unrounded, _ = fp8.quantize_static(nn.functional.silu(gate) * up, mlp.down_proj.input_scale)
    assert (unrounded.view(torch.uint8) != fused.view(torch.uint8)).sum() > 0


def test_the_fused_reference_rounds_silu_and_the_product_like_c10_bfloat16():
    """silu_kernel<BFloat16>(x) = BFloat16(x / (1 + expf(-x))); BFloat16 * BFloat16 = BFloat16(float * float)."""
    gate, up, scale = 3.515625, 0.29296875, torch.tensor([0.01])       # both exact in bf16
    silu = torch.tensor(gate / (1 + math.exp(-gate))).bfloat16()           # 3.4142 -> 3.421875
    product = (silu.float() * up).bfloat16()                                # 1.00250 -> 1.0
    expected = (product.float() * scale.reciprocal()).to(torch.float8_e4m3fn)
    got = silu_and_mul_quant(torch.tensor([[gate, up]]).bfloat16(), scale)
    assert got.float().item() == expected.float().item() == 96.0
    single = (nn.functional.silu(torch.tensor(gate)) * up * scale.reciprocal()).to(torch.float8_e4m3fn)
    assert single.float().item() == 104.0                  # 100.25: the unrounded product lands on another code


def test_fused_shards_are_requantized_as_vllms_requantize_with_max_scale():
    """q/k/v with per-tensor scales: vLLM dequantizes each shard in fp16 (per_tensor_dequantize) and quantizes it
    at the largest weight scale (scaled_fp8_quant: x * (1 / scale), clamp, e4m3fn)."""
    gen = torch.Generator().manual_seed(5)
    shards = [quantize_linear(nn.Linear(HIDDEN, 64, bias=False).requires_grad_(False), per_channel=False,
                              input_scale=torch.tensor([s])) for s in (0.02, 0.05, 0.03)]
    # small scales put the dequantized weights in fp16's subnormal range, where its rounding shows
    for shard, scale in zip(shards, (1e-6, 4e-6, 2.5e-6), strict=True):
        shard.weight_scale = torch.tensor([scale])
        shard.weight = (torch.randn(64, HIDDEN, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    original = [(s.weight.clone(), s.weight_scale.clone()) for s in shards]
    harmonize_fused(shards)
    top = torch.stack([scale for _, scale in original]).amax()
    for shard, (weight, scale) in zip(shards, original, strict=True):
        dequantized = weight.to(torch.float16) * scale.reshape(())          # vLLM: fp16 * 0-d fp32 -> fp16
        expected = (dequantized.float() * top.reciprocal()).clamp(-448, 448).to(torch.float8_e4m3fn)
        assert torch.equal(shard.weight.view(torch.uint8), expected.view(torch.uint8))
        assert shard.weight_scale.item() == top.item() and shard.input_scale.item() == torch.tensor(0.05).item()
    fp32_path = [fp8.quantize_with_scale(fp8.dequantize(w, s), top.reshape(1)) for w, s in original]
    assert any(not torch.equal(a.view(torch.uint8), b.weight.view(torch.uint8))
               for a, b in zip(fp32_path, shards, strict=True))


def test_the_prediction_runs_in_the_dtype_vllm_serves_the_draft_in():
    """vLLM refuses float32 for Quark checkpoints and runs the draft in the target's dtype: bf16 (fp16 drafts:
    fp16), recorded with the reason; a rollout that had to run in another dtype says so."""
    assert serving_numerics("bfloat16").dtype == torch.bfloat16
    assert serving_numerics("float16").dtype == torch.float16
    fp32 = serving_numerics("float32")
    assert fp32.dtype == torch.bfloat16 and "bf16 or fp16 only" in fp32.dtype_reason
    record = fp32.record()
    assert record["engine"] == "vllm" and record["compute_dtype"] == "bfloat16"
    assert "silu_and_mul_quant" in record["silu_mul"] and "requantize_with_max_scale" in record["fused_shards"]
    rollout = fp32.record(torch.float32)
    assert rollout["compute_dtype"] == "float32" and "source's dtype" in rollout["dtype_reason"]
    assert serving_numerics("bfloat16").record(torch.bfloat16) == serving_numerics("bfloat16").record()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_engine_childs_stand_in_is_the_fused_kernel_bit_for_bit(dtype, monkeypatch):
    """bench's child supplies _C.silu_and_mul_quant to vLLM's CPU build (which lacks it): the same FP8 codes as the
    kernel written out in eagle3_quant/runtime/serving.py."""
    import importlib
    from pathlib import Path

    import eagle3_quant.engines as engines

    monkeypatch.syspath_prepend(str(Path(engines.__file__).parent / "vllm"))     # the child is run by its path
    child = importlib.import_module("serve_cpu")
    x = (torch.randn(64, 192, generator=torch.Generator().manual_seed(6)) * 4).to(dtype)
    scale = torch.tensor([0.004])
    out = torch.empty(64, 96, dtype=torch.float8_e4m3fn)
    child._silu_and_mul_quant(out, x, scale)
    assert torch.equal(out.view(torch.uint8), silu_and_mul_quant(x, scale).view(torch.uint8))
