from __future__ import annotations

import pytest
import torch

from eagle3_quant.errors import Fp8LayoutError
from eagle3_quant.runtime import fp8

M, K, N = 7, 64, 48


def _operands(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen) * torch.linspace(0.1, 10, M).unsqueeze(1)
    w = torch.randn(N, K, generator=gen) * K ** -0.5
    return x, w


def test_per_token_scale_is_rowmax_over_448_in_fp32():
    x, _ = _operands()
    q, scale = fp8.quantize_per_token(x)
    assert scale.dtype == torch.float32 and scale.shape == (M, 1)
    assert torch.equal(scale, x.abs().amax(1, keepdim=True) / 448.0)
    assert q.dtype == torch.float8_e4m3fn
    # each row's max maps onto 448 exactly
    assert torch.equal(q.float().abs().amax(1), torch.full((M,), 448.0))


def test_all_zero_row_gets_vllm_floor_scale_not_zero():
    x = torch.zeros(2, 32)
    x[1, 3] = 5.0
    q, scale = fp8.quantize_per_token(x)
    assert scale[0, 0].item() == pytest.approx(1 / (448 * 512))
    assert q[0].float().abs().sum() == 0


def test_static_quantization_clamps_to_fp8_range():
    x = torch.tensor([[1.0, -1000.0, 0.5] + [0.0] * 13])
    q, scale = fp8.quantize_static(x, torch.tensor([0.5]))
    assert scale.shape == ()
    assert q.float()[0, :3].tolist() == [2.0, -448.0, 1.0]


def test_rowwise_scaled_mm_equals_dequantized_reference_bit_for_bit():
    x, w = _operands()
    a, sa = fp8.quantize_per_token(x)
    wq, sw = fp8.quantize_weight_per_channel(w)
    out = fp8.fp8_linear(a, sa, wq, sw)
    ref = fp8.dequantized_matmul(a, sa, wq, sw)
    assert out.dtype == torch.bfloat16 and out.shape == (M, N)
    assert torch.equal(out, ref)
    # and both are close to the unquantized product (FP8 error, not a bug)
    rel = (out.float() - x @ w.t()).norm() / (x @ w.t()).norm()
    assert rel < 0.06


def test_tensorwise_scaled_mm_equals_dequantized_reference():
    x, w = _operands(1)
    a, sa = fp8.quantize_static(x, (x.abs().amax() / 448).reshape(1))
    wq, sw = fp8.quantize_weight_per_tensor(w)
    assert sw.shape == (1,)
    assert torch.equal(fp8.fp8_linear(a, sa, wq, sw), fp8.dequantized_matmul(a, sa, wq, sw))


def test_static_input_with_per_channel_weight_broadcasts_to_rowwise():
    x, w = _operands(2)
    a, sa = fp8.quantize_static(x, torch.tensor([0.05]))
    wq, sw = fp8.quantize_weight_per_channel(w)
    assert torch.equal(fp8.fp8_linear(a, sa, wq, sw), fp8.dequantized_matmul(a, sa, wq, sw))


def test_layout_rules_are_enforced_on_cpu():
    x, w = _operands()
    a, sa = fp8.quantize_per_token(x)
    wq, sw = fp8.quantize_weight_per_channel(w)
    sb = sw.reshape(1, -1)
    with pytest.raises(Fp8LayoutError, match="column-major"):
        fp8.scaled_mm(a, wq.t().contiguous(), sa, sb)
    with pytest.raises(Fp8LayoutError, match="row-major"):
        fp8.scaled_mm(a.t().contiguous().t(), wq.t(), sa, sb)
    odd_w = fp8.quantize_weight_per_channel(torch.randn(N - 8, K))[0]
    with pytest.raises(Fp8LayoutError, match="multiples of 16"):
        fp8.scaled_mm(a, odd_w.t(), sa, torch.ones(1, N - 8))
    with pytest.raises(Fp8LayoutError, match="float32"):
        fp8.scaled_mm(a, wq.t(), sa.to(torch.bfloat16), sb)
    with pytest.raises(Fp8LayoutError, match="rowwise"):
        fp8.scaled_mm(a, wq.t(), sa, sw)
    with pytest.raises(Fp8LayoutError, match="float8"):
        fp8.scaled_mm(x, wq.t(), sa, sb)


def test_fnuz_conversion_doubles_scales_and_keeps_values():
    _, w = _operands()
    wq, sw = fp8.quantize_weight_per_channel(w)
    wq.view(torch.int8)[0, 0] = -128  # negative zero in e4m3fn, NaN in e4m3fnuz
    nuz, sw2, si2 = fp8.e4m3fn_to_e4m3fnuz(wq, sw, torch.tensor([0.25]))
    assert nuz.dtype == torch.float8_e4m3fnuz
    assert torch.equal(sw2, sw * 2) and si2.item() == 0.5
    assert nuz.float()[0, 0].item() == 0.0
    assert not torch.isnan(nuz.float()).any()
    assert torch.equal(fp8.dequantize(nuz, sw2), fp8.dequantize(wq, sw))
    assert wq.view(torch.int8)[0, 0].item() == -128  # input untouched


def test_a_cpu_torch_without_rowwise_scaled_mm_gets_the_same_product_and_one_warning(monkeypatch):
    """torch 2.11's CPU _scaled_mm takes only scalar scales; the runtime then computes the product itself."""
    x, w = _operands(3)
    a, sa = fp8.quantize_per_token(x)
    wq, sw = fp8.quantize_weight_per_channel(w)
    expected = fp8.fp8_linear(a, sa, wq, sw)
    real = torch._scaled_mm

    def tensorwise_only(a, b, scale_a, scale_b, **kwargs):
        if a.device.type == "cpu" and (scale_a.numel() > 1 or scale_b.numel() > 1):
            raise RuntimeError("Now _scaled_mm only supports per-tensor scaling for CPU backend.")
        return real(a, b, scale_a=scale_a, scale_b=scale_b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", tensorwise_only)
    fp8.cpu_rowwise_scaled_mm.cache_clear()
    fp8._say_cpu_fallback_once.cache_clear()
    try:
        assert not fp8.cpu_rowwise_scaled_mm()
        with pytest.warns(RuntimeWarning, match="per-tensor scales") as said:
            assert torch.equal(fp8.fp8_linear(a, sa, wq, sw), expected)
            assert torch.equal(fp8.fp8_linear(a, sa, wq, sw), expected)
        assert len(said) == 1
        # two scalar scales still go to torch's own op
        static, per_tensor = fp8.quantize_static(x, torch.tensor([0.05])), fp8.quantize_weight_per_tensor(w)
        assert torch.equal(fp8.fp8_linear(*static, *per_tensor), fp8.dequantized_matmul(*static, *per_tensor))
    finally:
        fp8.cpu_rowwise_scaled_mm.cache_clear()
        fp8._say_cpu_fallback_once.cache_clear()


def test_this_torch_reports_its_cpu_rowwise_support_truthfully():
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.bfloat16)
        supported = True
    except RuntimeError:
        supported = False
    assert fp8.cpu_rowwise_scaled_mm() is supported
