from __future__ import annotations

import json

import pytest

from eagle3_quant.errors import DraftFormatError, NotAnEagle3DraftError, UnsupportedSourceError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat
from fixtures.synthetic import SHAPES

TINY = SHAPES["tiny"]


@pytest.mark.parametrize("fmt", list(DraftFormat))
@pytest.mark.parametrize("shards", [1, 3])
def test_reads_every_format_single_and_sharded(make_draft, fmt, shards):
    draft = read_draft(make_draft(fmt, shards))
    assert draft.format is fmt
    assert len(draft.checkpoint.weight_files) == shards
    assert (draft.checkpoint.index_file is not None) == (shards > 1)
    cfg = draft.config
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.draft_vocab_size) == (
        TINY.hidden, TINY.intermediate, TINY.vocab, TINY.draft_vocab)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (TINY.heads, TINY.kv_heads,
                                                                              TINY.head_dim)
    assert [lin.role for lin in draft.layout.linears] == [
        "fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    assert draft.layout.linear("q_proj").module == fmt.layer_prefix + "self_attn.q_proj"
    assert draft.layout.optional_present == ("d2t", "t2d")
    assert draft.params_by_part()["fc"] == TINY.hidden * 3 * TINY.hidden


def test_eagle_format_defaults_rope_theta_and_speculators_reads_nested_config(make_draft):
    eagle = read_draft(make_draft(DraftFormat.EAGLE, name="eagle"))
    assert eagle.config.rope_theta == 10000.0
    assert eagle.config.architecture == "LlamaForCausalLM"
    spec = read_draft(make_draft(DraftFormat.SPECULATORS, name="spec"))
    assert spec.config.rope_theta == 500000.0
    assert spec.config.verifier == "example-org/target"
    assert spec.config.aux_layer_ids == (2, 4, 5)


def test_recognised_by_tensors_not_architecture(make_draft):
    src = make_draft()
    config = json.loads((src / "config.json").read_text())
    config["architectures"] = ["SomethingElse"]
    (src / "config.json").write_text(json.dumps(config))
    assert read_draft(src).format is DraftFormat.SPECFORGE


def test_shape_disagreeing_with_config_names_tensor(make_draft):
    src = make_draft()
    config = json.loads((src / "config.json").read_text())
    config["hidden_size"] = 96
    config["head_dim"] = 24
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(DraftFormatError, match=r"tensor 'fc.weight': shape \[64, 192\] disagrees"):
        read_draft(src)


def test_plain_target_model_is_not_a_draft(tmp_path):
    import torch
    from safetensors.torch import save_file

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8}))
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(8, 8),
               "model.layers.1.self_attn.q_proj.weight": torch.zeros(8, 8)}, tmp_path / "model.safetensors")
    with pytest.raises(NotAnEagle3DraftError, match="plain decoder model"):
        read_draft(tmp_path)


@pytest.mark.slow
def test_already_quantized_source_refused(quantized_tiny):
    _, out = quantized_tiny()
    with pytest.raises(UnsupportedSourceError, match="already quantized"):
        read_draft(out)


def test_inspect_plan_and_size_estimate(make_draft):
    report = inspect_draft(make_draft())
    actions = {row.role: row.quantize for row in report.linears}
    assert actions == {"fc": False, "q_proj": True, "k_proj": True, "v_proj": True, "o_proj": True,
                       "gate_proj": True, "up_proj": True, "down_proj": True, "lm_head": False}
    assert report.vllm_exclude == [r"re:(.*\.)?fc$", r"re:(.*\.)?lm_head$"]
    h, i = TINY.hidden, TINY.intermediate
    q, kv = TINY.heads * TINY.head_dim, TINY.kv_heads * TINY.head_dim
    fp8_numel = q * 2 * h + 2 * kv * 2 * h + h * q + 3 * h * i
    fp8_rows = q + 2 * kv + h + 2 * i + h
    assert report.source_bytes - report.estimated_output_bytes == fp8_numel - 4 * fp8_rows


def test_speculators_norm_before_residual_defaults_true(make_draft):
    src = make_draft(DraftFormat.SPECULATORS)
    config = json.loads((src / "config.json").read_text())
    del config["norm_before_residual"]
    (src / "config.json").write_text(json.dumps(config))
    assert read_draft(src).config.norm_before_residual is True
    assert read_draft(make_draft(name="sf")).config.norm_before_residual is False
