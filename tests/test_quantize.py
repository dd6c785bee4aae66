from __future__ import annotations

import json

import pytest
import torch
from conftest import folder_hashes, load_tensors

from eagle3_quant.errors import OutputExistsError, SchemeError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.util.hashing import sha256_file

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fmt", list(DraftFormat))
@pytest.mark.parametrize("shards", [1, 3])
def test_ptpc_output_dtypes_scales_and_error(quantized_tiny, fmt, shards):
    src, out = quantized_tiny(fmt, shards)
    before, after = load_tensors(src), load_tensors(out)
    p = fmt.layer_prefix
    quantized = [p + m for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
    for module in quantized:
        w, scale = after[module + ".weight"], after[module + ".weight_scale"]
        ref = before[module + ".weight"].float()
        assert w.dtype == torch.float8_e4m3fn
        assert scale.dtype == torch.float32 and scale.shape == (w.shape[0],)
        assert bool((scale > 0).all())
        torch.testing.assert_close(scale, ref.abs().amax(dim=1) / 448.0, rtol=1e-6, atol=0)
        deq = w.float() * scale[:, None]
        rel = (deq - ref).norm() / ref.norm()
        assert rel <= 0.04, (module, float(rel))
    untouched = set(before) - {m + ".weight" for m in quantized}
    assert untouched >= {"fc.weight", "lm_head.weight", "d2t", "t2d", "norm.weight"}
    for name in untouched:
        assert after[name].dtype == before[name].dtype and torch.equal(after[name], before[name]), name
    assert set(after) == set(before) | {m + ".weight_scale" for m in quantized}


@pytest.mark.parametrize("fmt", list(DraftFormat))
def test_config_keys_preserved_and_exclude_rewritten(quantized_tiny, fmt):
    src, out = quantized_tiny(fmt)
    source = json.loads((src / "config.json").read_text())
    written = json.loads((out / "config.json").read_text())
    for key, value in source.items():
        assert written[key] == value, key
    qc = written["quantization_config"]
    assert qc["exclude"] == [r"re:(.*\.)?fc$", r"re:(.*\.)?lm_head$"]
    assert qc["layer_type_quant_config"] == {} and qc["export"]["kv_cache_group"] == []
    assert qc["global_quant_config"]["input_tensors"]["is_dynamic"] is True
    assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()


def test_manifest_hashes_every_file(quantized_tiny):
    src, out = quantized_tiny()
    manifest = json.loads((out / "eagle3_quant.json").read_text())
    assert manifest["scheme"]["name"] == "ptpc_fp8"
    assert manifest["source"]["format"] == "specforge"
    outputs = {o["path"]: o for o in manifest["outputs"]}
    assert set(outputs) == {p.name for p in out.iterdir() if p.name[0] != "."} - {"eagle3_quant.json"}
    for name, entry in outputs.items():
        assert entry["sha256"] == sha256_file(out / name) and entry["size"] == (out / name).stat().st_size
    assert {i["path"] for i in manifest["inputs"]} == {p.name for p in src.iterdir()}
    assert [layer["quantized"] for layer in manifest["layers"]] == [False] + [True] * 7 + [False]


def test_extra_exclusions_quantize_fc_and_source_untouched(make_draft, tmp_path):
    src = make_draft(DraftFormat.SPECULATORS, shards=2)
    before = folder_hashes(src)
    result = quantize_draft(src, tmp_path / "out", exclude=["o_proj", "gate_up_proj"], device="cpu",
                            quantize_fc=True, engine="vllm")
    assert folder_hashes(src) == before
    assert {d.role for d in result.plan.excluded} == {"o_proj", "gate_proj", "up_proj", "lm_head"}
    tensors = load_tensors(tmp_path / "out")
    assert tensors["fc.weight"].dtype == torch.float8_e4m3fn
    assert tensors["layers.0.self_attn.o_proj.weight"].dtype == torch.bfloat16
    assert tensors["layers.0.mlp.down_proj.weight"].dtype == torch.float8_e4m3fn
    exclude = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]["exclude"]
    assert r"re:(.*\.)?fc$" not in exclude and r"re:(.*\.)?o_proj$" in exclude
    assert result.loader_check.ok


def test_existing_out_refused_then_forced(make_draft, tmp_path):
    src = make_draft()
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError, match="already exists"):
        quantize_draft(src, out, device="cpu")
    assert (out / "keep.txt").exists()
    quantize_draft(src, out, device="cpu", force=True)
    assert not (out / "keep.txt").exists() and (out / "eagle3_quant.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("where", ["same", "inside"])
def test_out_equal_or_inside_src_refused(make_draft, where):
    src = make_draft()
    before = folder_hashes(src)
    out = src if where == "same" else src / "fp8"
    with pytest.raises(OutputExistsError):
        quantize_draft(src, out, device="cpu", force=True)
    assert folder_hashes(src) == before


def test_static_scheme_without_calibration_is_refused(make_draft, tmp_path):
    with pytest.raises(SchemeError, match="needs calibration"):
        quantize_draft(make_draft(), tmp_path / "out", scheme="fp8")
    with pytest.raises(SchemeError, match="valid schemes: ptpc_fp8, fp8"):
        quantize_draft(make_draft(name="b"), tmp_path / "out", scheme="int4")
