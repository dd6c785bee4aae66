"""The INT8 (w8a8_int8), INT4 (w4a16_int4), NVFP4 and MXFP8 (w_mxfp8_a_mxfp8) schemes without running Quark: the
registry's facts, the refusals before any work, INT4's group choice, vLLM's Quark parser replayed, the bytes the
cost model counts and the runtime's math (test_int_fp4_quantize.py runs Quark, vLLM and SGLang on them)."""

from __future__ import annotations

import pytest
import torch

from eagle3_quant import quantize_draft
from eagle3_quant.cost import WeightTensor, layer_linear_modules, project_scheme, step_cost
from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, vllm_scheme_choice
from eagle3_quant.errors import OptionsError, SchemeError
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.runtime import int_linear, nvfp4_linear
from eagle3_quant.schemes import DEVICE_PROFILE_NAMES, SCHEMES, get_scheme, resolve_group
from fixtures.synthetic import DraftShape, write_synthetic_draft

NEW = ("w8a8_int8", "w4a16_int4", "nvfp4", "w_mxfp8_a_mxfp8")


def test_new_schemes_are_registered_with_what_the_ladder_and_the_kernel_check_read():
    int8, int4, nvfp4, mxfp8 = (get_scheme(n) for n in NEW)
    assert [s.vllm_scheme for s in (int8, int4, nvfp4, mxfp8)] == ["QuarkW8A8Int8", "QuarkW4A16Int4", "QuarkNVFP4",
                                                                   "QuarkOCP_MX"]
    assert [(s.weight.element_bits, s.activation_bits) for s in (int8, int4, nvfp4, mxfp8)] == [
        (8, 8), (4, None), (4, 4), (8, 8)]
    assert [s.weight.kind for s in (int8, int4, nvfp4, mxfp8)] == ["int8", "int4", "nvfp4", "mxfp8"]
    # devices from vLLM 0.33's kernel tables (schemes.py names each kernel)
    assert int8.native_devices == int4.native_devices == DEVICE_PROFILE_NAMES
    assert nvfp4.native_devices == ("b200",) and mxfp8.native_devices == ("mi355x", "b200")
    assert SCHEMES["ptpc_fp8"].native_devices == DEVICE_PROFILE_NAMES
    assert SCHEMES["w_mxfp4_a_mxfp4"].native_devices == ("mi355x", "b200")
    for scheme in SCHEMES.values():
        assert set(scheme.native_devices) <= set(DEVICE_PROFILE_NAMES)
        assert dict(scheme.gemm).keys() == {"nvidia", "amd"}, scheme.name
    assert "INT8 x INT8" in dict(int8.gemm)["nvidia"] and "W4A16" in dict(int4.gemm)["amd"]
    assert "NVFP4 block-scaled" in dict(nvfp4.gemm)["nvidia"] and "MXFP8 block-scaled" in dict(mxfp8.gemm)["amd"]
    assert (nvfp4.needs_calibration, int4.needs_calibration, int4.rounding, int4.file_to_file) == (
        True, False, "awq", False)
    assert int4.weight.describe() == "INT4 per group of 128 (scales and zero points), static"
    assert int4.input.describe() == "BF16 (not quantized)" and not int4.static_input
    assert nvfp4.weight.describe().startswith("NVFP4 E2M1 per group of 16 (E4M3 scales")
    assert mxfp8.weight.describe() == "MXFP8 E4M3 per group of 32 (E8M0 scales), static"
    for name in NEW:      # SGLang 0.5.23's Quark parser builds FP8 W8A8 and MXFP4 W4A4 only
        assert SCHEMES[name].engines == ("vllm",)
        assert "No quark compatible scheme was found" in SCHEMES[name].why_not("sglang")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"scheme": "w4a16_int4"}, SchemeError, "runs AWQ on calibration data by default: give --calib CAL .* or --rtn"),
    ({"scheme": "nvfp4"}, SchemeError, "static input scales and needs calibration data"),
    ({"scheme": "ptpc_fp8", "rtn": True}, SchemeError, "--rtn replaces AWQ, which only w4a16_int4 runs"),
    ({"scheme": "w4a16_int4", "rtn": True, "gptq": True, "calib": "cal"}, SchemeError, "choose one"),
    ({"scheme": "w4a16_int4", "smooth_alpha": 0.5, "calib": "cal"}, SchemeError,
     "--smooth-alpha is for FP8 and INT8 schemes .*drop scheme w4a16_int4"),
    ({"scheme": "nvfp4", "smooth_alpha": 0.5, "calib": "cal"}, SchemeError, "drop scheme nvfp4"),
    ({"scheme": "w_mxfp8_a_mxfp8", "gptq": True, "calib": "cal"}, SchemeError, "block-scaled weights"),
    ({"scheme": "nvfp4", "gptq": True, "calib": "cal"}, SchemeError, "block-scaled weights"),
    ({"scheme": "w4a16_int4", "draft_vocab": 100, "calib": "cal"}, SchemeError, "with --draft-vocab give --rtn"),
    ({"scheme": "w8a8_int8", "engine": "sglang"}, SchemeError, "w8a8_int8 cannot be served by sglang: SGLang 0.5.23"),
    ({"scheme": "auto", "rtn": True, "calib": "cal"}, SchemeError, "drop --rtn"),
])
def test_options_refuse_before_any_work(kwargs, error, match):
    with pytest.raises(error, match=match):
        QuantizeOptions(**kwargs)


def test_options_accept_each_scheme_with_its_data():
    QuantizeOptions(scheme="w4a16_int4", rtn=True)
    QuantizeOptions(scheme="w4a16_int4", gptq=True, calib="cal")
    QuantizeOptions(scheme="w8a8_int8", smooth_alpha=0.5, calib="cal")
    QuantizeOptions(scheme="w8a8_int8", gptq=True, calib="cal")
    QuantizeOptions(scheme="w_mxfp8_a_mxfp8")


def test_sglang_refusal_is_one_line_before_the_draft_is_read(make_draft, tmp_path):
    src = make_draft()
    with pytest.raises(SchemeError, match=r"nvfp4 cannot be served by sglang: .*no linear scheme for NVFP4 weights"):
        quantize_draft(src, tmp_path / "out", scheme="nvfp4", calib=tmp_path / "none", engine="both")
    with pytest.raises(OptionsError, match="unknown engine"):
        quantize_draft(src, tmp_path / "out", scheme="w8a8_int8", engine="trt")
    assert not (tmp_path / "out").exists()


def test_int4_groups_are_128_or_the_largest_that_divides_every_width(tmp_path):
    int4 = get_scheme("w4a16_int4")
    assert resolve_group(int4, [1152, 1536]).weight.group_size == 128
    assert resolve_group(int4, [1152, 576, 1536]).weight.group_size == 64      # SmolLM2's hidden 576
    assert resolve_group(int4, [128, 64, 160]).weight.group_size == 32
    assert resolve_group(get_scheme("nvfp4"), [576]) is get_scheme("nvfp4")
    draft = read_draft(write_synthetic_draft(tmp_path / "tiny", "tiny"))
    assert make_plan(draft, int4).scheme.weight.group_size == 32
    odd = read_draft(write_synthetic_draft(tmp_path / "odd", DraftShape(64, 144, 4, 2, 16, 512, 256,
                                                                        target_layers=8)))
    with pytest.raises(SchemeError, match=r"groups of 32 input elements, but midlayer\.mlp\.down_proj\.weight has "
                                          r"144 inputs .* --exclude down_proj"):
        make_plan(odd, int4)
    with pytest.raises(SchemeError, match=r"groups of 16 input elements, but midlayer\.mlp\.down_proj"):
        make_plan(read_draft(write_synthetic_draft(tmp_path / "odd16", DraftShape(
            64, 136, 4, 2, 16, 512, 256, target_layers=8))), get_scheme("nvfp4"))


def _quark(weight, inputs, pack_method="reorder") -> dict:
    return {"quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": pack_method},
            "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [],
            "global_quant_config": {"weight": weight, "input_tensors": inputs}}


INT8_W = {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0, "symmetric": True, "is_dynamic": False}
INT8_A = {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 1, "symmetric": True, "is_dynamic": True}
UINT4_W = {"dtype": "uint4", "qscheme": "per_group", "group_size": 64, "symmetric": False, "is_dynamic": False}
FP4 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 16}
FP8_T = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}
MXFP8 = {"dtype": "fp8_e4m3", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0"}


# vLLM 0.33 quark.py: _get_scheme_cls_from_config, _is_nvfp4, _is_w8a8_int8, _is_w4a16_int4; quark/utils.py:
# parse_w4a16_int4_weight_config (test_int_fp4_quantize.py asks vLLM's own QuarkConfig about the written configs)
@pytest.mark.parametrize(("weight", "inputs", "pack", "chosen", "buildable"), [
    (INT8_W, INT8_A, "reorder", "QuarkW8A8Int8", True),
    ({**INT8_W, "symmetric": False}, INT8_A, "reorder", None, False),       # asymmetric weights: no scheme
    (UINT4_W, None, "reorder", "QuarkW4A16Int4", True),
    (UINT4_W, None, "order", "QuarkW4A16Int4", True),
    (UINT4_W, None, "none", None, False),                                    # pack_method must be order/reorder
    ({**UINT4_W, "group_size": None}, None, "reorder", "QuarkW4A16Int4", False),
    ([{**FP4, "is_dynamic": False}, FP8_T], [{**FP4, "is_dynamic": True}, FP8_T], "reorder", "QuarkNVFP4", True),
    ([{**FP4, "is_dynamic": False, "group_size": 32}, FP8_T], [{**FP4, "is_dynamic": True}, FP8_T], "reorder",
     None, False),                                                           # a list that is not NVFP4 raises
    ({**MXFP8, "is_dynamic": False}, {**MXFP8, "is_dynamic": True}, "reorder", "QuarkOCP_MX", True),
])
def test_loader_replay_picks_vllms_class(weight, inputs, pack, chosen, buildable):
    assert vllm_scheme_choice({"weight": weight, "input_tensors": inputs}, pack) [0] == chosen
    check = check_loader_compat(_quark(weight, inputs, pack))
    assert check.ok == buildable, check.problems
    if buildable:
        assert {layer.scheme for layer in check.layers if layer.quantized} == {chosen}


def test_cost_counts_each_scheme_as_it_writes_it():
    """Step bytes per linear [out 960, in 576] (SmolLM2's fused qkv shape, group 64 for INT4)."""
    tensors = [WeightTensor("midlayer.self_attn.q_proj.weight", (960, 576), "BF16"),
               WeightTensor("midlayer.mlp.down_proj.weight", (576, 1536), "BF16")]
    bytes_of = {name: step_cost(project_scheme(tensors, name), name).total_bytes for name in SCHEMES}
    weights = 960 * 576 + 576 * 1536
    assert bytes_of["w8a8_int8"] == weights + 4 * (960 + 576)
    assert bytes_of["w_mxfp8_a_mxfp8"] == weights + weights // 32
    assert bytes_of["nvfp4"] == weights // 2 + weights // 16 + 2 * 2 * 4
    groups = 576 // 64 * 960 + 1536 // 64 * 576                   # group 64: 576 does not divide by 128
    assert bytes_of["w4a16_int4"] == weights // 2 + 2 * groups + groups // 2
    # bits a weight: MXFP4 4.25, INT4 in groups of 64 4.31 (BF16 scale, 4-bit zero point), NVFP4 4.5, MXFP8 8.25
    assert bytes_of["w_mxfp4_a_mxfp4"] < bytes_of["w4a16_int4"] < bytes_of["nvfp4"] < bytes_of["w8a8_int8"] \
        == bytes_of["ptpc_fp8"] < bytes_of["w_mxfp8_a_mxfp8"]
    assert layer_linear_modules(tensors) == ["midlayer.self_attn.q_proj", "midlayer.mlp.down_proj"]


def test_int8_per_token_quantization_and_exact_integer_gemm():
    x = torch.tensor([[1.0, -2.0, 0.5, 127.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    codes, scale = int_linear.quantize_per_token_int8(x)
    assert codes.tolist() == [[1, -2, 0, 127], [0, 0, 0, 0]] and scale.flatten().tolist() == [1.0, 0.0]
    weight = torch.tensor([[127, -128, 3, 1]], dtype=torch.int8)
    layer = int_linear.Int8Linear(weight, torch.tensor([0.5]))
    assert layer(x).float().tolist() == [[(127 + 256 + 0 + 127) * 0.5], [0.0]]


def test_int4_codes_unpack_in_awq_order_and_dequantize_with_zero_points():
    from eagle3_quant.quantize.int_fp4_twins import int4_weight

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(24, 64, generator=gen).to(torch.bfloat16)
    packed, scale, zero = int4_weight(weight, 32)
    assert packed.shape == (64, 3) and scale.shape == (2, 24) and zero.shape == (2, 3)
    layer = int_linear.Int4Linear(packed, scale, zero)
    error = (layer.dequantized_weight(torch.float32) - weight.float()).abs()
    # within a step (half a step of rounding, half of the zero point's): the codes sit where the weights are
    assert bool((error <= scale.float().T.repeat_interleave(32, 1) + 1e-6).all())
    assert float(error.mean()) < float(scale.float().mean()) / 3
    word = torch.tensor([[0x76543210]], dtype=torch.int32)         # nibble i holds i
    assert int_linear.unpack_int4(word).tolist() == [[0, 4, 1, 5, 2, 6, 3, 7]]


def test_nvfp4_activation_rounding_follows_vllms_cast_to_fp4():
    """vLLM's cast_to_fp4 (nvfp4_emulation_utils.py): ties go to the even E2M1 value."""
    x = torch.tensor([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, -0.74, 6.0])
    assert nvfp4_linear.cast_to_fp4(x).tolist() == [0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, 6.0]
    row = torch.linspace(-3, 3, 16).to(torch.bfloat16)[None]
    out = nvfp4_linear.quant_dequant_nvfp4(row, torch.tensor(448.0 * 6 / 3))
    assert out.dtype == torch.bfloat16 and float((out.float() - row.float()).abs().max()) <= 0.5
