"""Draft families: Qwen3-class (q/k norm, qkv_proj without self_attn.) and MLA-class drafts, read, planned
and checked against the runtime names of the vLLM class each one loads into."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, loader_family
from eagle3_quant.engines.vllm.names import exclude_pattern, runtime_layers
from eagle3_quant.errors import DraftFormatError, SchemeError, UnsupportedSourceError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.plan import make_plan
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.schemes import get_scheme
from fixtures.synthetic import TINY_MLA, write_synthetic_draft

PTPC = get_scheme("ptpc_fp8")


def _quark_config(exclude: list[str]) -> dict:
    weight = {"dtype": "fp8_e4m3", "qscheme": "per_channel", "is_dynamic": False, "ch_axis": 0}
    inputs = {"dtype": "fp8_e4m3", "qscheme": "per_channel", "is_dynamic": True, "ch_axis": 1}
    return {"quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
            "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": exclude,
            "global_quant_config": {"weight": weight, "input_tensors": inputs}}


def _edit_config(src: Path, **changes) -> None:
    config = json.loads((src / "config.json").read_text())
    config.update(changes)
    (src / "config.json").write_text(json.dumps(config))


# ---- Qwen3 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", [DraftFormat.SPECFORGE, DraftFormat.SPECULATORS])
def test_qwen3_draft_reads_with_per_head_qk_norms(tmp_path, fmt):
    draft = read_draft(write_synthetic_draft(tmp_path / "q", "tiny-qwen3", fmt))
    assert draft.config.family is DraftFamily.QWEN3
    p = fmt.layer_prefix + "self_attn."
    assert draft.layout.parts[p + "q_norm.weight"] == "norm" and draft.layout.parts[p + "k_norm.weight"] == "norm"
    assert not draft.layout.extra


def test_qwen3_qk_norm_shape_checked_against_head_dim(tmp_path):
    src = write_synthetic_draft(tmp_path / "q", "tiny-qwen3")
    _edit_config(src, head_dim=8, num_attention_heads=8, num_key_value_heads=4)
    with pytest.raises(DraftFormatError, match="q_norm|shape"):
        read_draft(src)


def test_qwen3_missing_qk_norm_is_named(tmp_path):
    src = write_synthetic_draft(tmp_path / "q", "tiny")
    _edit_config(src, architectures=["Eagle3Qwen3ForCausalLM"])
    with pytest.raises(DraftFormatError) as err:
        read_draft(src)
    assert err.value.tensor == "midlayer.self_attn.q_norm.weight"


def test_qwen3_runtime_qkv_has_no_self_attn_level():
    names = [layer.name for layer in runtime_layers(61, DraftFamily.QWEN3)]
    assert "model.layers.61.qkv_proj" in names and "model.layers.61.self_attn.o_proj" in names
    assert not any(n.endswith("self_attn.qkv_proj") for n in names)


def test_exclude_patterns_match_every_family_runtime_name():
    assert exclude_pattern("q_proj") == r"re:(.*\.)?(q_proj|qkv_proj)$"
    assert exclude_pattern("o_proj") == r"re:(.*\.)?o_proj$"
    assert exclude_pattern("q_a_proj") == r"re:(.*\.)?(q_a_proj|fused_qkv_a_proj)$"
    for family in DraftFamily:
        for fused_q_a in (True, False):
            for layer in runtime_layers(61, family, fused_q_a):
                pattern = exclude_pattern(layer.roles[0])[3:]
                assert re.match(pattern, layer.name), (family, layer.name)
                for sglang in ("model." + layer.name.rsplit(".", 1)[-1],):
                    assert re.match(pattern, sglang)


@pytest.mark.parametrize("exclude", [[], ["qkv_proj"], ["attention"], ["mlp"], ["o_proj", "down_proj"]])
def test_qwen3_replay_agrees_with_plan(tmp_path, exclude):
    draft = read_draft(write_synthetic_draft(tmp_path / "q", "tiny-qwen3"))
    plan = make_plan(draft, PTPC, exclude)
    patterns = [exclude_pattern(d.role) for d in plan.excluded]
    check = check_loader_compat(_quark_config(patterns), plan.intended(), **loader_family(draft.config))
    assert check.ok, check.problems
    qkv = next(x for x in check.layers if x.runtime_name == "model.layers.126.qkv_proj")
    assert qkv.quantized is plan.intended()["q_proj"]


def test_llama_exact_name_exclude_misses_qwen3_qkv():
    """The reproduced vLLM failure: an exact Llama-style name does not exclude Qwen3's qkv_proj."""
    intended = {"fc": False, "lm_head": False, "q_proj": False, "o_proj": True, "gate_proj": True,
                "down_proj": True}
    config = _quark_config(["model.fc", "lm_head", "model.layers.61.self_attn.qkv_proj"])
    check = check_loader_compat(config, intended, depths=[61], family=DraftFamily.QWEN3)
    assert [x.runtime_name for x in check.layers if not x.ok] == ["model.layers.61.qkv_proj"]


def test_inspect_names_family(tmp_path):
    report = inspect_draft(write_synthetic_draft(tmp_path / "q", "tiny-qwen3"))
    assert report.family == "qwen3"
    assert r"re:(.*\.)?fc$" in report.vllm_exclude


# ---- MLA --------------------------------------------------------------------------------------

def test_mla_draft_reads_with_mla_linears(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "m", "tiny-mla"))
    assert draft.config.family is DraftFamily.MLA and draft.config.mla == TINY_MLA
    shapes = {lin.role: (lin.out_features, lin.in_features) for lin in draft.layout.linears}
    assert shapes == {"fc": (64, 192), "q_a_proj": (32, 128), "q_b_proj": (4 * 32, 32),
                      "kv_a_proj_with_mqa": (32 + 16, 128), "kv_b_proj": (4 * 32, 32), "o_proj": (64, 64),
                      "gate_proj": (160, 64), "up_proj": (160, 64), "down_proj": (64, 160), "lm_head": (256, 64)}
    assert draft.layout.parts["midlayer.self_attn.kv_a_layernorm.weight"] == "norm"
    assert not draft.layout.extra


def test_mla_without_q_lora_has_plain_q_proj(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "m", "tiny-mla-no-qlora"))
    roles = [lin.role for lin in draft.layout.linears]
    assert "q_proj" in roles and "q_a_proj" not in roles and "q_b_proj" not in roles
    assert "midlayer.self_attn.q_a_layernorm.weight" not in draft.layout.parts


def test_mla_shape_checked_against_mla_dims(tmp_path):
    src = write_synthetic_draft(tmp_path / "m", "tiny-mla")
    _edit_config(src, kv_lora_rank=48)
    with pytest.raises(DraftFormatError) as err:
        read_draft(src)
    assert err.value.tensor == "midlayer.self_attn.kv_a_proj_with_mqa.weight"


def test_mla_missing_dim_is_named(tmp_path):
    src = write_synthetic_draft(tmp_path / "m", "tiny-mla")
    config = json.loads((src / "config.json").read_text())
    del config["qk_rope_head_dim"]
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(DraftFormatError) as err:
        read_draft(src)
    assert err.value.field == "qk_rope_head_dim"


def test_mla_indexer_refused_in_one_line(tmp_path):
    src = write_synthetic_draft(tmp_path / "m", "tiny-mla")
    _edit_config(src, index_topk=2048)
    with pytest.raises(UnsupportedSourceError, match="index_topk") as err:
        read_draft(src)
    assert err.value.field == "index_topk" and "\n" not in str(err.value)


def test_unregistered_eagle3_architecture_refused(tmp_path):
    src = write_synthetic_draft(tmp_path / "m", "tiny")
    _edit_config(src, architectures=["Eagle3MistralForCausalLM"])
    with pytest.raises(UnsupportedSourceError, match="Eagle3MistralForCausalLM") as err:
        read_draft(src)
    assert err.value.field == "architectures"


def test_unsupported_speculators_layer_type_refused(tmp_path):
    src = write_synthetic_draft(tmp_path / "m", "tiny", DraftFormat.SPECULATORS)
    config = json.loads((src / "config.json").read_text())
    config["transformer_layer_config"]["model_type"] = "mistral"
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedSourceError, match="mistral"):
        read_draft(src)


def test_mla_plan_defaults_and_fused_q_a(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "m", "tiny-mla"))
    plan = make_plan(draft, PTPC)
    assert {d.role for d in plan.excluded} == {"fc", "lm_head", "kv_b_proj"}
    assert "absorbs" in next(d.reason for d in plan.excluded if d.role == "kv_b_proj")
    assert {d.role for d in make_plan(draft, PTPC, ["fused_qkv_a_proj"]).excluded} == {
        "fc", "lm_head", "kv_b_proj", "q_a_proj", "kv_a_proj_with_mqa"}
    with pytest.raises(SchemeError, match="fused_qkv_a_proj"):
        make_plan(draft, PTPC, ["q_a_proj"])
    with pytest.raises(SchemeError, match="kv_b_proj"):   # the valid names listed are this draft's
        make_plan(draft, PTPC, ["k_proj"])


@pytest.mark.parametrize("shape", ["tiny-mla", "tiny-mla-no-qlora"])
@pytest.mark.parametrize("exclude", [[], ["attention"], ["kv_b_proj"], ["mlp", "o_proj"]])
def test_mla_replay_agrees_with_plan(tmp_path, shape, exclude):
    draft = read_draft(write_synthetic_draft(tmp_path / "m", shape))
    plan = make_plan(draft, PTPC, exclude)
    patterns = [exclude_pattern(d.role) for d in plan.excluded]
    check = check_loader_compat(_quark_config(patterns), plan.intended(), **loader_family(draft.config))
    assert check.ok, check.problems
    names = {x.runtime_name for x in check.layers if x.depth == 61}
    if shape == "tiny-mla":
        assert "model.layers.61.self_attn.fused_qkv_a_proj" in names
    else:
        assert {"model.layers.61.self_attn.q_proj", "model.layers.61.self_attn.kv_a_proj_with_mqa"} <= names


def test_inspect_mla(tmp_path):
    report = inspect_draft(write_synthetic_draft(tmp_path / "m", "tiny-mla"))
    assert report.family == "mla" and "kv_lora 32" in report.heads
    assert [row.role for row in report.linears if row.quantize] == [
        "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj", "gate_proj", "up_proj", "down_proj"]


# ---- n aux states -----------------------------------------------------------------------------

def test_two_aux_states_size_fc(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "a", "tiny-2aux"))
    assert draft.config.num_aux == 2 and draft.layout.linear("fc").in_features == 2 * 64
    assert not draft.config.aux_includes_final_layer


def test_fc_width_checked_against_aux_count(tmp_path):
    src = write_synthetic_draft(tmp_path / "a", "tiny-2aux")
    _edit_config(src, num_aux_hidden_states=3, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5]})
    with pytest.raises(DraftFormatError) as err:
        read_draft(src)
    assert err.value.tensor == "fc.weight" and "[64, 192]" in str(err.value)


def test_aux_count_must_fit_the_ids(tmp_path):
    src = write_synthetic_draft(tmp_path / "a", "tiny")
    _edit_config(src, num_aux_hidden_states=5)
    with pytest.raises(DraftFormatError) as err:
        read_draft(src)
    assert err.value.field == "num_aux_hidden_states"


def test_final_layer_tap_resolved_after_the_ids(tmp_path):
    from eagle3_quant.taps.conventions import resolve_taps

    draft = read_draft(write_synthetic_draft(tmp_path / "a", "tiny-final-aux"))
    assert draft.config.num_aux == 4 and draft.config.aux_includes_final_layer
    taps = resolve_taps(draft.config, 8)
    assert len(taps.indices) == 4 and taps.indices[-1] == 8          # hidden_states[8]: after the last layer
    with pytest.raises(DraftFormatError, match="final layer"):
        resolve_taps(draft.config, None, ids=[1, 2, 3])
    two = read_draft(write_synthetic_draft(tmp_path / "b", "tiny-2aux")).config
    assert len(resolve_taps(two, 8).indices) == 2
    with pytest.raises(DraftFormatError, match="reads 2 target layers"):
        resolve_taps(two, 8, ids=[1, 2, 3])


# ---- drafts sharing the target's lm_head ------------------------------------------------------

def test_draft_without_lm_head_shares_the_targets(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3"))
    assert draft.layout.shared_lm_head and "lm_head" not in [lin.role for lin in draft.layout.linears]
    plan = make_plan(draft, PTPC)
    assert {d.role for d in plan.excluded} == {"fc"}
    patterns = [exclude_pattern(d.role) for d in plan.excluded]
    assert check_loader_compat(_quark_config(patterns), plan.intended()).ok


def test_missing_lm_head_with_a_pruned_vocab_is_named(tmp_path):
    src = write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3")
    _edit_config(src, draft_vocab_size=256)
    with pytest.raises(DraftFormatError, match="full vocab") as err:
        read_draft(src)
    assert err.value.tensor == "lm_head.weight"


def test_runtime_refuses_a_shared_lm_head_with_the_reason(tmp_path):
    from eagle3_quant import load_draft

    with pytest.raises(DraftFormatError, match="lm_head.weight") as err:
        load_draft(write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3"))
    assert "shares the target's lm_head" in str(err.value)
