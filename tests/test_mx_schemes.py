"""MX schemes (issue 14): w_mxfp4_a_mxfp4 through Quark's file-to-file path, w_mxfp4_a_fp8 through its in-memory
path, the export check, the loader replay, the refusals, and the runtime's MX math against Quark's own."""

from __future__ import annotations

import json

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from conftest import folder_hashes, load_tensors

from eagle3_quant import load_draft, quantize_draft
from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, vllm_scheme_choice
from eagle3_quant.engines.vllm.names import exclude_pattern
from eagle3_quant.errors import DraftFormatError, OptionsError, SchemeError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime import mx
from eagle3_quant.runtime.mx_linear import MxLinear
from eagle3_quant.schemes import SCHEMES, get_scheme

LAYER_WEIGHTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                 "mlp.up_proj", "mlp.down_proj")


@pytest.fixture(scope="module")
def mx_runs(tmp_path_factory):
    """One Quark run per MX scheme on the synthetic tiny draft, shared by the tests that read it."""
    from fixtures.synthetic import write_synthetic_draft

    cache = {}

    def get(scheme: str):
        if scheme not in cache:
            root = tmp_path_factory.mktemp(scheme)
            src = write_synthetic_draft(root / "src", "tiny", DraftFormat.SPECFORGE)
            cal = write_calibration(root / "cal", write_target(root / "target"))
            before = folder_hashes(src)
            result = quantize_draft(src, root / "out", scheme=scheme, calib=cal, device="cpu", engine="vllm")
            assert folder_hashes(src) == before
            cache[scheme] = (src, cal, result)
        return cache[scheme]

    return get


def test_mx_schemes_are_registered_as_data():
    a4, a8 = get_scheme("w_mxfp4_a_mxfp4"), get_scheme("w_mxfp4_a_fp8")
    assert (a4.weight.dtype, a4.weight.group_size, a4.weight.scale_format, a4.weight.element_bits) == (
        "fp4", 32, "e8m0", 4)
    assert a4.input.mx and a4.input.dynamic and not a4.needs_calibration and a4.vllm_scheme == "QuarkOCP_MX"
    assert not a8.input.mx and not a8.input.dynamic and a8.needs_calibration
    assert a8.vllm_scheme == "QuarkW4A8_MXFP4_FP8"
    assert a4.why_not("sglang") is None and "W4A8" in a8.why_not("sglang")
    assert not SCHEMES["ptpc_fp8"].mx and SCHEMES["ptpc_fp8"].weight.describe() == "FP8 E4M3 per-channel, static"
    assert a4.weight.describe() == "MXFP4 E2M1 per group of 32 (E8M0 scales), static"


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8"])
def test_mx_export_packs_weights_and_keeps_fc_lm_head_bf16(mx_runs, scheme):
    src, _, result = mx_runs(scheme)
    before, after = load_tensors(src), load_tensors(result.output)
    for role in LAYER_WEIGHTS:
        name = f"midlayer.{role}"
        rows, cols = before[name + ".weight"].shape
        assert after[name + ".weight"].dtype == torch.uint8 and after[name + ".weight"].shape == (rows, cols // 2)
        assert after[name + ".weight_scale"].dtype == torch.uint8
        assert after[name + ".weight_scale"].shape == (rows, cols // 32)
        # the packed bytes are exactly our torch MXFP4 quantization of the BF16 weight (Quark's even scales)
        packed, scale = mx.quantize_mxfp4(before[name + ".weight"])
        assert torch.equal(after[name + ".weight"], packed) and torch.equal(after[name + ".weight_scale"], scale)
        assert (name + ".input_scale" in after) == (scheme == "w_mxfp4_a_fp8")
    for name in ("fc.weight", "lm_head.weight"):
        assert torch.equal(after[name], before[name])
    config = json.loads((result.output / "config.json").read_text())["quantization_config"]
    weight = config["global_quant_config"]["weight"]
    assert (weight["dtype"], weight["qscheme"], weight["group_size"], weight["scale_format"]) == (
        "fp4", "per_group", 32, "e8m0")
    assert config["exclude"] == [exclude_pattern("fc"), exclude_pattern("lm_head")]
    assert result.loader_check.ok
    assert {x.scheme for x in result.loader_check.layers if x.quantized} == {get_scheme(scheme).vllm_scheme}
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest["scheme"]["name"] == scheme and "MXFP4" in manifest["scheme"]["weight"]


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8"])
def test_mx_artifact_runs_in_the_runtime_close_to_bf16(mx_runs, scheme):
    src, cal, result = mx_runs(scheme)
    from eagle3_quant.quantize.calibration import calibration_batches, calibration_embedding
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.records.calibration import load_calibration

    embedding = calibration_embedding(read_draft(src), load_calibration(cal))
    ref = load_draft(src, device="cpu", embedding=embedding)
    quant = load_draft(result.output, device="cpu", embedding=embedding)
    linears = quant.linears()
    assert all(isinstance(linears[f"midlayer.{r}"], MxLinear) for r in LAYER_WEIGHTS)
    assert not isinstance(linears["fc"], MxLinear)
    kinds = {linears[f"midlayer.{r}"].input_kind for r in LAYER_WEIGHTS}
    assert kinds == ({"mxfp4"} if scheme == "w_mxfp4_a_mxfp4" else {"fp8_static"})
    batch = calibration_batches(load_calibration(cal), "cpu")[0]
    with torch.no_grad():
        a = ref(batch["input_ids"], batch["aux_hidden_states"])[0].float()
        b = quant(batch["input_ids"], batch["aux_hidden_states"])[0].float()
    cosine = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0)
    assert torch.isfinite(b).all() and 0.8 < float(cosine) < 1.0


def test_mx_scheme_refuses_a_width_not_multiple_of_32_naming_the_tensor(tmp_path):
    from fixtures.synthetic import DraftShape, write_synthetic_draft

    src = write_synthetic_draft(tmp_path / "src", DraftShape(64, 144, 4, 2, 16, 512, 256, target_layers=8))
    with pytest.raises(SchemeError, match=r"midlayer\.mlp\.down_proj\.weight has 144 inputs"):
        quantize_draft(src, tmp_path / "out", scheme="w_mxfp4_a_mxfp4", device="cpu")
    assert not (tmp_path / "out").exists()
    # kept BF16, the rest quantizes
    result = quantize_draft(src, tmp_path / "out", scheme="w_mxfp4_a_mxfp4", exclude=("down_proj",), device="cpu")
    assert result.loader_check.ok


def _qc(weight: dict, inputs: dict | None) -> dict:
    return {"quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
            "layer_quant_config": {}, "layer_type_quant_config": {},
            "exclude": [exclude_pattern("fc"), exclude_pattern("lm_head")],
            "global_quant_config": {"weight": weight, "input_tensors": inputs}}


MXFP4_W = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0", "is_dynamic": False}


@pytest.mark.parametrize(("inputs", "scheme", "buildable"), [
    ({"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": True}, "QuarkOCP_MX", True),
    (None, "QuarkOCP_MX", True),
    ({"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True},
     "QuarkW4A8_MXFP4_FP8", True),
    # vLLM's parser picks QuarkOCP_MX for dynamic FP8 inputs, whose constructor then raises
    ({"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": True, "symmetric": True}, "QuarkOCP_MX", False),
    ({"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": False}, None, False),
])
def test_loader_replay_knows_the_vllm_mx_class_and_whether_it_builds(inputs, scheme, buildable):
    chosen, problem = vllm_scheme_choice({"weight": MXFP4_W, "input_tensors": inputs})
    assert chosen == scheme and (problem is None) == buildable
    check = check_loader_compat(_qc(MXFP4_W, inputs))
    assert check.ok == buildable
    if not buildable:
        assert check.problems


def test_mx_math_matches_quark_bit_for_bit():
    from quark.torch.kernel.hw_emulation.hw_emulation_interface import fake_quantize_fp4_fp6_per_group_with_scale
    from quark.torch.quantization.utils import even_round, reshape_to_blocks
    from quark.torch.utils.pack import create_pack_method

    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        x = (torch.randn(48, 256, generator=gen) * torch.logspace(-4, 4, 256)).to(dtype)
        x[0, :32] = 0
        amax = reshape_to_blocks(x, 32, -1).abs().amax(-1)
        for element in ("fp4", "fp6_e2m3", "fp6_e3m2"):
            ref = fake_quantize_fp4_fp6_per_group_with_scale(x, even_round(amax, element), axis=-1, group_size=32,
                                                             quant_dtype=element)
            assert torch.equal(mx.quant_dequant_mx(x, element), ref)
        packed, scale = mx.quantize_mxfp4(x)
        unpacked = create_pack_method("per_group", "fp4").unpack(packed, reorder=False)
        assert torch.equal(mx.unpack_e2m1(packed), unpacked)     # Quark's own unpacking of the same bytes
        assert torch.equal(mx.dequantize_mxfp4(packed, scale, dtype), mx.quant_dequant_mx(x, "fp4"))


def test_e8m0_and_e2m1_decoding():
    assert mx.e2m1_table().tolist()[:8] == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert mx.unpack_e2m1(torch.tensor([[0x21, 0xF7]], dtype=torch.uint8)).tolist() == [[0.5, 1.0, 6.0, -6.0]]
    scales = mx.e8m0_to_float(torch.tensor([0, 126, 127, 128, 254, 255], dtype=torch.uint8))
    assert scales[:5].tolist() == [2.0 ** -127, 0.5, 1.0, 2.0, 2.0 ** 127] and torch.isnan(scales[5])


def test_static_mx_config_without_input_scale_is_refused_by_the_runtime(tmp_path):
    from eagle3_quant.reading.mx_layout import mx_input_kind

    with pytest.raises(DraftFormatError, match="no input_scale"):
        mx_input_kind({"quantization_config": _qc(MXFP4_W, {"dtype": "fp8_e4m3", "qscheme": "per_tensor",
                                                            "is_dynamic": False})},
                      {"midlayer.mlp.down_proj": False}, tmp_path)


def test_an_engine_that_cannot_load_the_scheme_is_refused_before_any_work(make_draft, tmp_path):
    from validate_helpers import write_manifest_naming

    from eagle3_quant.validate.sglang_load import unsupported_format

    src = make_draft()
    with pytest.raises(SchemeError, match=r"w_mxfp4_a_fp8 cannot be served by sglang: SGLang 0\.5\.23"):
        quantize_draft(src, tmp_path / "out", scheme="w_mxfp4_a_fp8", calib=tmp_path / "none", engine="sglang")
    # named, both engines must load it: refused in one line that says the default takes those that can
    with pytest.raises(SchemeError, match=r"w_mxfp4_a_fp8 cannot be served by sglang: .*the default, auto"):
        quantize_draft(src, tmp_path / "out", scheme="w_mxfp4_a_fp8", calib=tmp_path / "none", engine="both")
    with pytest.raises(OptionsError, match="unknown engine 'trt'"):
        quantize_draft(src, tmp_path / "out", scheme="ptpc_fp8", engine="trt")
    assert not (tmp_path / "out").exists()
    # validate's sglang_load check on such an artifact: skipped with the reason, SGLang never started
    write_manifest_naming(tmp_path / "a8", "w_mxfp4_a_fp8")
    (tmp_path / "a8" / "config.json").write_text(json.dumps({"model_type": "llama",
                                                              "architectures": ["LlamaForCausalLMEagle3"]}))
    assert "W4A8 is MoE-only" in unsupported_format(tmp_path / "a8")


def test_cli_refuses_an_mx_scheme_for_sglang_in_one_line(make_draft, tmp_path, capsys):
    from eagle3_quant.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(make_draft()), str(tmp_path / "out"), "--scheme", "w_mxfp4_a_fp8", "--calib",
              str(tmp_path), "--engine", "sglang"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")


@pytest.mark.slow
def test_vllm_own_code_loads_each_mx_artifact_with_the_intended_scheme(mx_runs):
    from eagle3_quant.validate.vllm_load import run_vllm_load_many, vllm_load_check, vllm_missing_reason

    if vllm_missing_reason():
        pytest.skip(vllm_missing_reason())
    schemes = ("w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8")
    results = run_vllm_load_many([mx_runs(s)[2].output for s in schemes])
    for scheme, result in zip(schemes, results, strict=True):
        check = vllm_load_check(result)
        assert check.status == "passed", check.detail
        layers = {name: info for name, info in result["linears"].items() if "layers.0." in name}
        assert {info["scheme"] for info in layers.values()} == {get_scheme(scheme).vllm_scheme}
        kernels = {info["kernel"] for info in layers.values()}
        assert kernels == ({"EmulationMxfp4LinearKernel"} if scheme == "w_mxfp4_a_mxfp4"
                           else {"QuarkW4A8_MXFP4_FP8._apply_emulation"})
        assert result["linears"]["model.fc"]["scheme"] is None
        assert "not the gfx950 MX GEMM" in check.detail and result["logits"]["top1_agreement"] == 1.0


def test_kernel_check_skips_mx_artifacts_off_gfx950_with_the_reason(tmp_path):
    from eagle3_quant.validate.kernel_check import kernel_checks, run_kernel_check

    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": _qc(MXFP4_W, None)}))
    kernel = run_kernel_check(tmp_path, "cpu")
    assert kernel["status"] == "skipped" and "native MX GEMMs need gfx950" in kernel["reason"]
    checks = kernel_checks(kernel)
    assert checks and all(c.status == "skipped" for c in checks)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8"])
def test_validate_reads_mx_artifacts(mx_runs, scheme):
    from eagle3_quant.validate.api import validate_draft

    src, _, result = mx_runs(scheme)
    report = validate_draft(result.output, reference=src, kernel=False, vllm=False, sglang=False,
                            gates={"min_weight_sqnr_db": 15.0})
    status = {c.name: c.status for c in report.checks}
    assert {k: status[k] for k in ("mx_weights", "finite", "unchanged_parts", "config_consistency", "loader_compat",
                                   "manifest", "weight_sqnr")} == dict.fromkeys(
        ("mx_weights", "finite", "unchanged_parts", "config_consistency", "loader_compat", "manifest",
         "weight_sqnr"), "passed"), [(c.name, c.detail) for c in report.checks]
    sqnr = report.layers if hasattr(report, "layers") else None
    assert sqnr is None or all(15 < row["sqnr_db"] < 25 for row in sqnr)    # MXFP4: ~18-20 dB on these weights
    assert report.label == "MXFP4 E2M1" and "exactly the MXFP4 E2M1 linears" in report.check("loader_compat").detail
