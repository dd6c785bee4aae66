"""w8a8_int8, w4a16_int4, nvfp4 and w_mxfp8_a_mxfp8 written by Quark on tiny drafts of every family: the tensors are
Quark's (the simulation's twins recompute them), fc and lm_head stay BF16, vLLM's own QuarkConfig picks the class
the registry names, the cost model counts the bytes written, and vLLM's loader and forward agree with the runtime."""

from __future__ import annotations

import json
import os

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from conftest import folder_hashes, load_tensors

from eagle3_quant import quantize_draft
from eagle3_quant.cost import as_bf16, checkpoint_cost, project_scheme, step_cost
from eagle3_quant.engines.vllm.names import exclude_pattern
from eagle3_quant.errors import UnsupportedSourceError
from eagle3_quant.quantize.int_fp4_twins import int4_weight, int8_weight, nvfp4_global, nvfp4_weight
from eagle3_quant.reading.artifact import read_artifact
from eagle3_quant.runtime import mx
from eagle3_quant.schemes import get_scheme
from fixtures.synthetic import write_synthetic_draft

pytestmark = pytest.mark.slow
NEW = ("w8a8_int8", "w4a16_int4", "nvfp4", "w_mxfp8_a_mxfp8")
LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(source, calibration, {run: output}) for the four schemes on the tiny Llama draft, INT4 also round to nearest,
    and each scheme on the tiny Qwen3 and MLA drafts."""
    root = tmp_path_factory.mktemp("int-fp4")
    cal = write_calibration(root / "cal", write_target(root / "target"))
    sources = {shape: write_synthetic_draft(root / "src" / shape, shape)
               for shape in ("tiny", "tiny-qwen3", "tiny-mla")}
    before = folder_hashes(sources["tiny"])
    outs = {}
    for shape, src in sources.items():
        for scheme in NEW:
            name = scheme if shape == "tiny" else f"{shape}/{scheme}"
            outs[name] = quantize_draft(src, root / name, scheme=scheme, calib=cal, device="cpu").output
    outs["w4a16_int4/rtn"] = quantize_draft(sources["tiny"], root / "rtn", scheme="w4a16_int4", rtn=True,
                                            device="cpu").output
    assert folder_hashes(sources["tiny"]) == before
    return sources["tiny"], cal, outs


def test_written_tensors_are_quarks_and_fc_lm_head_stay_bf16(runs):
    src, _, outs = runs
    before = load_tensors(src)
    for run in ("w8a8_int8", "w4a16_int4/rtn", "nvfp4", "w_mxfp8_a_mxfp8"):
        after = load_tensors(outs[run])
        for name in ("fc.weight", "lm_head.weight", "midlayer.input_layernorm.weight"):
            assert torch.equal(after[name], before[name]), (run, name)
        config = json.loads((outs[run] / "config.json").read_text())["quantization_config"]
        assert config["exclude"] == [exclude_pattern("fc"), exclude_pattern("lm_head")]
        glob = [before[f"midlayer.{r}.weight"] for r in LAYER[:3]]
        for role in LAYER:
            name, weight = f"midlayer.{role}", before[f"midlayer.{role}.weight"]
            if run == "w8a8_int8":       # Quark: scale amax / 127.5 in bf16, codes rounded in float32
                codes, scale = int8_weight(weight)
                assert torch.equal(after[name + ".weight"], codes) and torch.equal(after[name + ".weight_scale"], scale)
            elif run == "w_mxfp8_a_mxfp8":
                packed, scale = mx.quantize_mx(weight, "fp8_e4m3")
                assert after[name + ".weight"].dtype == torch.float8_e4m3fn
                assert torch.equal(after[name + ".weight"].view(torch.uint8), packed)
                assert torch.equal(after[name + ".weight_scale"], scale)
            elif run == "nvfp4":         # q/k/v share one global scale (Quark's shared groups, vLLM's fused layer)
                shared = nvfp4_global(glob) if role in LAYER[:3] else nvfp4_global(
                    [before[f"midlayer.mlp.{r}.weight"] for r in ("gate_proj", "up_proj")]) \
                    if role in LAYER[4:6] else nvfp4_global([weight])
                packed, scale = nvfp4_weight(weight, shared)
                assert torch.equal(after[name + ".weight_scale_2"], shared.reshape(()))
                assert torch.equal(after[name + ".weight"], packed)
                assert torch.equal(after[name + ".weight_scale"].view(torch.uint8), scale.view(torch.uint8))
            else:                        # INT4 round to nearest, groups of 32 (tiny's widths)
                packed, scale, zero = int4_weight(weight, 32)
                assert torch.equal(after[name + ".weight_scale"], scale)
                assert torch.equal(after[name + ".weight_zero_point"], zero)
                assert torch.equal(after[name + ".weight"], packed)
        if run == "nvfp4":
            inputs = {float(after[f"midlayer.{r}.input_scale_2"]) for r in LAYER[:3]}
            assert len(inputs) == 1 and inputs.pop() > 0           # one input global scale for the fused qkv


def test_vllms_own_quark_config_picks_the_registered_class(runs):
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.model_executor.layers import linear
        from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
    except Exception as exc:  # noqa: BLE001 - any import failure means the check cannot run here
        pytest.skip(f"vLLM 0.33 is not importable here ({type(exc).__name__}: {exc})")
    _, _, outs = runs
    for run, out in outs.items():
        scheme = get_scheme(run.rsplit("/", 1)[-1] if "/" in run and not run.endswith("rtn") else run.split("/")[0])
        config = json.loads((out / "config.json").read_text())["quantization_config"]
        vllm_config = QuarkConfig.from_config(config)
        chosen = vllm_config.get_scheme_cls(linear.RowParallelLinear, "model.layers.1.mlp.down_proj")[2]
        assert chosen.__name__ == scheme.vllm_scheme, run
        manifest = json.loads((out / "eagle3_quant.json").read_text())
        assert manifest["scheme"]["name"] == scheme.name and manifest["engines"]["serves"] == ["vllm"]


def test_awq_scales_fold_into_the_norms_and_are_recorded(runs):
    src, _, outs = runs
    manifest = json.loads((outs["w4a16_int4"] / "eagle3_quant.json").read_text())
    record = manifest["smoothing"]
    assert record["method"].startswith("AWQ") and set(record["sites"]) == {"qkv", "gate_up_proj", "down_proj"}
    assert all(0 <= site["ratio"] < 1 for site in record["sites"].values())
    assert "midlayer.post_attention_layernorm.weight" in record["folded_tensors"]
    before, after = load_tensors(src), load_tensors(outs["w4a16_int4"])
    norm = "midlayer.post_attention_layernorm.weight"
    assert not torch.equal(after[norm], before[norm]) and after[norm].dtype == before[norm].dtype
    assert not torch.equal(after["midlayer.mlp.up_proj.weight"], load_tensors(outs["w4a16_int4/rtn"])[
        "midlayer.mlp.up_proj.weight"])


def test_cost_model_counts_the_bytes_written(runs):
    _, _, outs = runs
    for scheme in NEW:
        written = checkpoint_cost(outs[scheme])
        projected = step_cost(project_scheme(as_bf16(list(written.tensors)), scheme), scheme)
        assert projected.total_bytes == written.written.total_bytes, scheme
        assert written.ratio < 0.8, scheme


def test_an_mla_draft_without_q_lora_is_refused_for_every_new_scheme(tmp_path):
    src = write_synthetic_draft(tmp_path / "src", "tiny-mla-no-qlora")
    for scheme in ("w8a8_int8", "w_mxfp8_a_mxfp8"):
        with pytest.raises(UnsupportedSourceError, match="vLLM 0.33 cannot serve this draft: an MLA draft without"):
            quantize_draft(src, tmp_path / scheme, scheme=scheme, device="cpu")
        assert not (tmp_path / scheme).exists()


def test_vllm_loads_each_artifact_and_its_forward_agrees_with_the_runtime(runs):
    from eagle3_quant.validate.vllm_load import run_vllm_load_many, vllm_load_check, vllm_missing_reason

    if vllm_missing_reason():
        pytest.skip(vllm_missing_reason())
    _, _, outs = runs
    names = [*NEW, "tiny-mla/w4a16_int4", "tiny-qwen3/nvfp4"]
    kernels = {"w8a8_int8": "TorchInt8ScaledMM", "w4a16_int4": "TorchWNA16", "nvfp4": "EmulationNvFp4LinearKernel",
               "w_mxfp8_a_mxfp8": "EmulationMxfp8LinearKernel"}
    for name, result in zip(names, run_vllm_load_many([outs[n] for n in names]), strict=True):
        check = vllm_load_check(result)
        assert check.status == "passed", (name, check.detail)
        scheme = get_scheme(name.split("/")[-1])
        assert {i["scheme"] for i in result["linears"].values() if i["scheme"]} == {scheme.vllm_scheme}
        assert {i["kernel"] for i in result["linears"].values() if i["scheme"]} == {kernels[scheme.name]}
        assert result["not_identical"] == [] and result["uninitialized"] == []
        for form in result["logits_by_form"].values():
            assert form["top1_agreement"] == 1.0 and form["relative_dlogit"] < 1e-3, name
    art = read_artifact(outs["w4a16_int4"])
    assert {linear.kind for linear in art.quant_linears.values()} == {"int4"}
