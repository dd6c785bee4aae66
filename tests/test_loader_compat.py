from __future__ import annotations

import re

import pytest

from eagle3_quant.engines.loader_compat import check_loader_compat
from eagle3_quant.engines.vllm_names import exclude_pattern, runtime_layers
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
        for shard in layer.shard_names():
            assert bool(re.match(pattern, shard)) == (shard == "model.fc")


def test_disagreeing_shards_and_missing_export_reported():
    config = quark_config([r"re:.*q_proj$"])
    del config["export"]
    check = check_loader_compat(config, depths=[32])
    assert any("export" in p for p in check.config_problems)
    assert any("disagree" in p for p in check.problems)


def test_partial_fused_exclusion_refused_by_plan(make_draft):
    draft = read_draft(make_draft(DraftFormat.SPECULATORS))
    with pytest.raises(SchemeError, match="qkv_proj"):
        make_plan(draft, get_scheme("ptpc_fp8"), ["q_proj"])
    plan = make_plan(draft, get_scheme("ptpc_fp8"), ["qkv_proj", "layers.0.mlp.down_proj"], quantize_fc=True)
    assert {d.role for d in plan.excluded} == {"q_proj", "k_proj", "v_proj", "down_proj", "lm_head"}
    with pytest.raises(SchemeError, match="valid names"):
        make_plan(draft, get_scheme("ptpc_fp8"), ["nonsense"])
