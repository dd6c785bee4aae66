from __future__ import annotations

import re

import pytest

from eagle3_quant.engines.vllm.loader_compat import check_loader_compat
from eagle3_quant.engines.vllm.names import exclude_pattern, runtime_layers
from eagle3_quant.errors import SchemeError
from eagle3_quant.plan import make_plan
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.schemes import get_scheme

PTPC_GLOBAL = {
    "weight": {"dtype": "fp8_e4m3", "is_dynamic": False, "qscheme": "per_channel", "ch_axis": 0},
    "input_tensors": {"dtype": "fp8_e4m3", "is_dynamic": True, "qscheme": "per_channel", "ch_axis": 1},
}


def quark_config(exclude):
    return {"quant_method": "quark", "global_quant_config": PTPC_GLOBAL, "exclude": exclude,
            "layer_quant_config": {}, "layer_type_quant_config": {},
            "export": {"kv_cache_group": [], "pack_method": "reorder"}}


INTENDED = {"fc": False, "q_proj": True, "k_proj": True, "v_proj": True, "o_proj": True, "gate_proj": True,
            "up_proj": True, "down_proj": True, "lm_head": False}


@pytest.mark.parametrize("depth", [32, 61])
def test_patterns_match_runtime_names_at_any_depth(depth):
    patterns = [exclude_pattern("fc"), exclude_pattern("lm_head")]
    check = check_loader_compat(quark_config(patterns), INTENDED, depths=[depth])
    assert check.ok, check.problems
    loads = {layer.runtime_name: layer.quantized for layer in check.layers}
    assert loads == {"model.fc": False, f"model.layers.{depth}.self_attn.qkv_proj": True,
                     f"model.layers.{depth}.self_attn.o_proj": True, f"model.layers.{depth}.mlp.gate_up_proj": True,
                     f"model.layers.{depth}.mlp.down_proj": True, "lm_head": False}
    assert {layer.scheme for layer in check.layers if layer.quantized} == {"QuarkW8A8Fp8"}


def test_quark_plain_exclude_list_is_flagged():
    check = check_loader_compat(quark_config(["fc", "lm_head"]), INTENDED, depths=[61])
    assert not check.ok
    assert [p.split(":")[0] for p in check.problems] == ["model.fc"]
    assert "would quantize" in check.problems[0]


def test_fc_pattern_does_not_touch_other_layers():
    pattern = exclude_pattern("fc")[3:]
    for layer in runtime_layers(61):
        assert bool(re.match(pattern, layer.name)) == (layer.name == "model.fc")


def test_exclude_patterns_are_the_agreed_design():
    assert exclude_pattern("fc") == r"re:(.*\.)?fc$"
    assert exclude_pattern("lm_head") == r"re:(.*\.)?lm_head$"
    assert exclude_pattern("o_proj") == r"re:(.*\.)?o_proj$"
    assert exclude_pattern("q_proj") == r"re:(.*\.)?(q_proj|qkv_proj)$"
    assert exclude_pattern("up_proj") == r"re:(.*\.)?(up_proj|gate_up_proj)$"


# vLLM Llama, vLLM Qwen3 (no self_attn. before qkv_proj) and SGLang (no layers.N, no mlp.) runtime names
ENGINE_NAMES = {"qkv_proj": ["model.layers.61.self_attn.qkv_proj", "model.layers.61.qkv_proj", "model.qkv_proj"],
                "o_proj": ["model.layers.61.self_attn.o_proj", "model.self_attn.o_proj"],
                "gate_up_proj": ["model.layers.61.mlp.gate_up_proj", "model.gate_up_proj"],
                "down_proj": ["model.layers.61.mlp.down_proj", "model.down_proj"]}


@pytest.mark.parametrize("role", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
def test_role_pattern_matches_its_fused_layer_in_every_engine_and_nothing_else(role):
    pattern = exclude_pattern(role)[3:]
    fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
             "up_proj": "gate_up_proj"}.get(role, role)
    for name, runtime_names in ENGINE_NAMES.items():
        for runtime_name in [*runtime_names, "model.fc", "lm_head"]:
            assert bool(re.match(pattern, runtime_name)) == (name == fused and runtime_name in runtime_names)


def test_per_shard_patterns_leave_the_fused_layer_fp8_and_are_flagged():
    """vLLM 0.33's draft QuarkConfig has no packed-modules mapping: only the fused name counts."""
    old = [r"re:(.*\.)?fc$", r"re:(.*\.)?lm_head$", *(rf"re:(.*\.)?self_attn\.{r}$" for r in ("q_proj", "k_proj",
                                                                                              "v_proj"))]
    kept = {**INTENDED, "q_proj": False, "k_proj": False, "v_proj": False}
    check = check_loader_compat(quark_config(old), kept, depths=[32])
    assert [p.split(":")[0] for p in check.problems] == ["model.layers.32.self_attn.qkv_proj"]
    assert "would quantize" in check.problems[0]
    new = [exclude_pattern(r) for r in ("fc", "lm_head", "q_proj", "k_proj", "v_proj")]
    assert check_loader_compat(quark_config(new), kept, depths=[32]).ok


def test_missing_export_reported():
    config = quark_config([exclude_pattern("fc"), exclude_pattern("lm_head")])
    del config["export"]
    check = check_loader_compat(config, INTENDED, depths=[32])
    assert any("export" in p for p in check.config_problems)
    assert not check.ok


def test_partial_fused_exclusion_refused_by_plan(make_draft):
    draft = read_draft(make_draft(DraftFormat.SPECULATORS))
    with pytest.raises(SchemeError, match="qkv_proj"):
        make_plan(draft, get_scheme("ptpc_fp8"), ["q_proj"])
    plan = make_plan(draft, get_scheme("ptpc_fp8"), ["qkv_proj", "layers.0.mlp.down_proj"], quantize_fc=True)
    assert {d.role for d in plan.excluded} == {"q_proj", "k_proj", "v_proj", "down_proj", "lm_head"}
    with pytest.raises(SchemeError, match="valid names"):
        make_plan(draft, get_scheme("ptpc_fp8"), ["nonsense"])
