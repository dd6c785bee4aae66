"""MXFP6 schemes (issue 14): w_mxfp6_e2m3_a_mxfp6_e2m3 and w_mxfp6_e3m2_a_mxfp6_e3m2 through Quark's file-to-file
path, their packing (4 elements in 3 bytes, Quark's Pack_fp6) bit-exact to Quark and vLLM, the export and loader
checks, the engine gating, and vLLM's own code loading them on CPU."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import folder_hashes, load_tensors

from eagle3_quant import load_draft, quantize_draft
from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, vllm_scheme_choice
from eagle3_quant.engines.vllm.names import exclude_pattern
from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime import mx
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.schemes import get_scheme

MXFP6 = ("w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e3m2_a_mxfp6_e3m2")
LAYER_WEIGHTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj")


def _fp6_weight(element: str) -> dict:
    return {"dtype": element, "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": False}


def _inputs(dtype: str, dynamic: bool = True, qscheme: str = "per_group") -> dict:
    return {"dtype": dtype, "qscheme": qscheme, "group_size": 32 if qscheme == "per_group" else None,
            "is_dynamic": dynamic, "symmetric": True}


@pytest.fixture(scope="module")
def fp6_runs(tmp_path_factory):
    """One Quark file-to-file run per MXFP6 scheme on the synthetic tiny draft."""
    from fixtures.synthetic import write_synthetic_draft

    cache = {}

    def get(scheme: str):
        if scheme not in cache:
            root = tmp_path_factory.mktemp(scheme)
            src = write_synthetic_draft(root / "src", "tiny", DraftFormat.SPECFORGE)
            before = folder_hashes(src)
            result = quantize_draft(src, root / "out", scheme=scheme, device="cpu", engine="vllm")
            assert folder_hashes(src) == before
            cache[scheme] = (src, result)
        return cache[scheme]

    return get


def test_mxfp6_schemes_are_data_served_by_vllm_only():
    for name, element in zip(MXFP6, ("fp6_e2m3", "fp6_e3m2"), strict=True):
        scheme = get_scheme(name)
        assert (scheme.weight.dtype, scheme.weight.element_bits, scheme.weight.group_size) == (element, 6, 32)
        assert scheme.input.mx and scheme.input.dynamic and scheme.input.dtype == element
        assert not scheme.needs_calibration and scheme.vllm_scheme == "QuarkOCP_MX"
        assert scheme.why_not("vllm") is None and "No quark compatible scheme" in scheme.why_not("sglang")
        assert scheme.weight.describe().startswith("MXFP6 ")


def test_fp6_tables_are_the_ocp_formats():
    e2m3, e3m2 = mx.element_table("fp6_e2m3"), mx.element_table("fp6_e3m2")
    assert e2m3[:9].tolist() == [0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0] and e2m3[31] == 7.5
    assert e3m2[:5].tolist() == [0, 0.0625, 0.125, 0.1875, 0.25] and e3m2[31] == 28.0
    assert e2m3[32] == 0 and e2m3[63] == -7.5 and mx.element_table("fp4").tolist() == mx.e2m1_table().tolist()
    # v0 | v1 << 6 | v2 << 12 | v3 << 18, little-endian in three bytes
    codes = torch.tensor([[1, 2, 3, 63]], dtype=torch.int32)
    packed = mx.pack_fp6_codes(codes)
    assert packed.tolist() == [[0x81, 0x30, 0xFC]] and torch.equal(mx.unpack_fp6_codes(packed), codes)
    assert (mx.packed_width(64, "fp6_e2m3"), mx.unpacked_width(48, "fp6_e3m2")) == (48, 64)
    assert (mx.element_bits_of(48, 2), mx.element_bits_of(32, 2), mx.element_bits_of(40, 2)) == (6, 4, None)


@pytest.mark.parametrize("element", ["fp6_e2m3", "fp6_e3m2"])
def test_fp6_quantize_unpack_dequantize_match_quark_and_vllm_bit_for_bit(element):
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import (
        dequantize_fp4_fp6_per_group,
        fake_quantize_fp4_fp6_per_group_with_scale,
    )
    from quark.torch.quantization.utils import even_round, reshape_to_blocks
    from quark.torch.utils.pack import create_pack_method

    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        x = (torch.randn(24, 256, generator=gen) * torch.logspace(-4, 4, 256)).to(dtype)
        x[0, :32] = 0
        amax = reshape_to_blocks(x, 32, -1).abs().amax(-1)
        scale = even_round(amax, element)
        qdq = fake_quantize_fp4_fp6_per_group_with_scale(x, scale, axis=-1, group_size=32, quant_dtype=element)
        packed, e8m0 = mx.quantize_mx(x, element)
        assert packed.shape == (24, 192) and e8m0.shape == (24, 8)
        # Quark's own packing of its quantized values writes our bytes; its unpacking reads our elements
        pack = create_pack_method(None, dtype=element)
        assert torch.equal(pack.pack((qdq.float() / scale.float().repeat_interleave(32, -1)), reorder=False), packed)
        assert torch.equal(pack.unpack(packed, reorder=False), mx.unpack_elements(packed, element))
        assert torch.equal(mx.dequantize_mx(packed, e8m0, element, dtype), qdq)
        # vLLM 0.33's _dequant_mxfp6 math (Quark's unpack, 2 ** (s - 127), dequantize_fp4_fp6_per_group)
        vllm_scale = 2 ** (e8m0.to(torch.int16) - 127).to(dtype)
        vllm = dequantize_fp4_fp6_per_group(pack.unpack(packed, reorder=False), vllm_scale, axis=-1, group_size=32,
                                            quant_dtype=element).to(dtype)
        assert torch.equal(mx.dequantize_mx(packed, e8m0, element, dtype), vllm)


@pytest.mark.parametrize(("inputs", "scheme", "buildable"), [
    (_inputs("fp6_e2m3"), "QuarkOCP_MX", True),
    (_inputs("fp4"), "QuarkOCP_MX", True),
    (None, "QuarkOCP_MX", True),
    # static FP8 inputs: vLLM's W4A8 class is MXFP4-only and _is_w_ocp_mx_a_x refuses static inputs
    (_inputs("fp8_e4m3", dynamic=False, qscheme="per_tensor"), None, False),
    (_inputs("fp8_e4m3", dynamic=True, qscheme="per_tensor"), "QuarkOCP_MX", False),
    (_inputs("fp8_e4m3"), "QuarkOCP_MX", False),     # MXFP8 inputs: EmulationMxfp6LinearKernel refuses them
])
def test_loader_replay_of_mxfp6_configs(inputs, scheme, buildable):
    weight = _fp6_weight("fp6_e2m3")
    chosen, problem = vllm_scheme_choice({"weight": weight, "input_tensors": inputs})
    assert chosen == scheme and (problem is None) == buildable
    qc = {"quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
          "layer_quant_config": {}, "layer_type_quant_config": {},
          "exclude": [exclude_pattern("fc"), exclude_pattern("lm_head")],
          "global_quant_config": {"weight": weight, "input_tensors": inputs}}
    assert check_loader_compat(qc).ok == buildable


def test_mxfp6_for_sglang_is_refused_before_any_work(make_draft, tmp_path):
    with pytest.raises(SchemeError, match=r"w_mxfp6_e2m3_a_mxfp6_e2m3 cannot be served by sglang: SGLang 0\.5\.23"):
        quantize_draft(make_draft(), tmp_path / "out", scheme="w_mxfp6_e2m3_a_mxfp6_e2m3", engine="both")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", MXFP6)
def test_mxfp6_export_packs_4_in_3_bytes_and_runs_in_the_runtime(fp6_runs, scheme):
    element = get_scheme(scheme).weight.dtype
    src, result = fp6_runs(scheme)
    before, after = load_tensors(src), load_tensors(result.output)
    for role in LAYER_WEIGHTS:
        name = f"midlayer.{role}"
        rows, cols = before[name + ".weight"].shape
        assert after[name + ".weight"].dtype == torch.uint8 and after[name + ".weight"].shape == (rows, cols * 3 // 4)
        assert after[name + ".weight_scale"].shape == (rows, cols // 32)
        packed, scale = mx.quantize_mx(before[name + ".weight"], element)     # Quark's bytes, bit for bit
        assert torch.equal(after[name + ".weight"], packed) and torch.equal(after[name + ".weight_scale"], scale)
        assert name + ".input_scale" not in after
    for name in ("fc.weight", "lm_head.weight"):
        assert torch.equal(after[name], before[name])
    config = json.loads((result.output / "config.json").read_text())["quantization_config"]["global_quant_config"]
    assert (config["weight"]["dtype"], config["input_tensors"]["dtype"], config["input_tensors"]["is_dynamic"]) == (
        element, element, True)
    assert result.loader_check.ok
    assert {x.scheme for x in result.loader_check.layers if x.quantized} == {"QuarkOCP_MX"}
    assert "MXFP6" in json.loads(result.manifest_path.read_text())["scheme"]["weight"]
    draft = load_draft(result.output, device="cpu")
    linears = draft.linears()
    layer = linears["midlayer.mlp.down_proj"]
    assert isinstance(layer, MxLinear) and (layer.element, layer.input_kind) == (element, "mx" + element)
    assert layer.in_features == before["midlayer.mlp.down_proj.weight"].shape[1]
    assert not isinstance(linears["fc"], MxLinear)


@pytest.mark.slow
def test_validate_reads_mxfp6_artifacts(fp6_runs):
    from eagle3_quant.validate.api import validate_draft

    src, result = fp6_runs(MXFP6[0])
    report = validate_draft(result.output, reference=src, kernel=False, vllm=False, sglang=False,
                            gates={"min_weight_sqnr_db": 15.0})
    status = {c.name: c.status for c in report.checks}
    names = ("mx_weights", "finite", "unchanged_parts", "config_consistency", "loader_compat", "manifest",
             "weight_sqnr")
    assert {k: status[k] for k in names} == dict.fromkeys(names, "passed"), [(c.name, c.detail) for c in
                                                                            report.checks]
    assert "MXFP6" in next(c.detail for c in report.checks if c.name == "mx_weights")
    sqnr = next(c for c in report.checks if c.name == "weight_sqnr")
    assert sqnr.status == "passed"


@pytest.mark.slow
def test_vllm_own_code_loads_the_mxfp6_artifacts_with_its_emulation_kernel(fp6_runs):
    from eagle3_quant.validate.vllm_load import run_vllm_load_many, vllm_load_check, vllm_missing_reason

    if vllm_missing_reason():
        pytest.skip(vllm_missing_reason())
    results = run_vllm_load_many([fp6_runs(s)[1].output for s in MXFP6])
    for result in results:
        check = vllm_load_check(result)
        assert check.status == "passed", check.detail
        layers = {name: info for name, info in result["linears"].items() if "layers.0." in name}
        assert {info["scheme"] for info in layers.values()} == {"QuarkOCP_MX"}
        assert {info["kernel"] for info in layers.values()} == {"EmulationMxfp6LinearKernel"}
        assert result["linears"]["model.fc"]["scheme"] is None
        assert "MXFP6" in result["mx_kernel"] and "not the gfx950 MX GEMM" in check.detail
        assert result["logits"]["top1_agreement"] == 1.0


def test_the_runtime_reads_the_mxfp6_input_kind_and_refuses_what_no_engine_runs(tmp_path):
    from eagle3_quant.errors import DraftFormatError
    from eagle3_quant.reading.mx_layout import mx_input_kind

    def config(inputs):
        return {"quantization_config": {"global_quant_config": {"weight": _fp6_weight("fp6_e3m2"),
                                                                "input_tensors": inputs}}}

    modules = {"midlayer.mlp.down_proj": False}
    assert mx_input_kind(config(_inputs("fp6_e3m2")), modules, tmp_path) == "mxfp6_e3m2"
    assert mx_input_kind(config(None), modules, tmp_path) == "none"
    with pytest.raises(DraftFormatError, match="fp6_e3m2 MX weights with input_tensors fp8_e4m3 static"):
        mx_input_kind(config(_inputs("fp8_e4m3", dynamic=False, qscheme="per_tensor")),
                      {"midlayer.mlp.down_proj": True}, tmp_path)
    with pytest.raises(ValueError, match="weight_scale must be E8M0 uint8"):
        packed, scale = mx.quantize_mx(torch.randn(8, 64), "fp6_e2m3")
        MxLinear(packed, scale, "mxfp6_e2m3", element="fp4")      # 6-bit bytes read as MXFP4: refused
