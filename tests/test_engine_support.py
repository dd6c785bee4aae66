"""Which engine serves which draft format (engines/draft_support.py, read from vLLM 0.33's and SGLang 0.5.23's
code): `inspect` says it, `quantize` refuses before any work what an `--engine` engine cannot serve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from draft_variants import write_variant

from eagle3_quant.engines.draft_support import RULES, check_draft_engines, engine_refusals, engines_serving
from eagle3_quant.errors import UnsupportedSourceError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.schemes import serving_engines
from fixtures.synthetic import write_synthetic_draft

BOTH, VLLM, SGLANG = ("vllm", "sglang"), ("vllm",), ("sglang",)
# draft -> the engines that serve it
SERVED = {
    "specforge": BOTH, "mla": BOTH, "mla-deepseek-yarn": BOTH, "two-aux": BOTH, "with-embedding": BOTH,
    "speculators": VLLM, "qwen3-speculators": VLLM, "eagle-default-theta": VLLM, "qwen3": VLLM,
    "final-aux-fc-norm": VLLM, "mla-no-q-lora": (),
}


def _edited(folder, **edits):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **edits}))
    return read_draft(folder)


@pytest.mark.parametrize("name", SERVED)
def test_engines_serving_each_draft_format(tmp_path, name):
    draft = read_draft(write_variant(tmp_path / name, name))
    assert engines_serving(draft.config, draft.format) == SERVED[name]
    for refusal in engine_refusals(draft.config, draft.format):
        assert refusal.engine not in SERVED[name] and refusal.field and "\n" not in refusal.line()


def test_config_edits_that_change_the_serving_engines(tmp_path):
    mla = write_variant(tmp_path / "mla", "mla")
    draft = _edited(mla, model_type="deepseek_v3")
    assert engines_serving(draft.config, draft.format) == SGLANG
    draft = _edited(mla, model_type="kimi_k2", architectures=["Eagle3DeepseekV3ForCausalLM"])
    assert engines_serving(draft.config, draft.format) == VLLM            # SGLang registers the V2 name only
    llama = write_variant(tmp_path / "llama", "specforge")
    for arch, served in (("Eagle3LlamaForCausalLM", VLLM), ("Eagle3MiniMaxM2ForCausalLM", VLLM),
                         ("LlamaForCausalLM", VLLM), ("MistralForCausalLMEagle", ())):
        draft = _edited(llama, architectures=[arch])
        assert engines_serving(draft.config, draft.format) == served, arch
    for pair in ("tiny_pair", "tiny_pair_mla"):
        draft = read_draft(Path(__file__).resolve().parent / "fixtures" / pair / "draft")
        assert engines_serving(draft.config, draft.format) == BOTH, pair


def test_quantize_gate_names_engine_field_and_the_engine_that_serves(tmp_path):
    draft = read_draft(write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3"))
    with pytest.raises(UnsupportedSourceError) as err:
        check_draft_engines(draft.config, draft.format, serving_engines("both"), "m3/config.json")
    assert err.value.field == "num_aux_hidden_states" and err.value.hint == "--engine vllm serves it"
    assert str(err.value).startswith("m3/config.json: field 'num_aux_hidden_states': SGLang 0.5.23 cannot serve")
    check_draft_engines(draft.config, draft.format, serving_engines("vllm"), "m3/config.json")   # no refusal
    with pytest.raises(UnsupportedSourceError, match="SGLang 0.5.23 cannot serve"):
        check_draft_engines(draft.config, draft.format, serving_engines("sglang"), "m3/config.json")
    nq = read_draft(write_variant(tmp_path / "nq", "mla-no-q-lora"))
    with pytest.raises(UnsupportedSourceError) as err:
        check_draft_engines(nq.config, nq.format, serving_engines("vllm"), "nq")
    assert err.value.field == "q_lora_rank" and err.value.hint.startswith("no engine serves it: SGLang 0.5.23")


def test_quantize_refuses_a_named_engine_or_no_engine_before_any_work(tmp_path):
    from eagle3_quant.quantize.api import quantize_draft

    src = write_variant(tmp_path / "q", "qwen3")
    with pytest.raises(UnsupportedSourceError, match=r"field 'architectures'.*\(--engine vllm serves it\)"):
        quantize_draft(src, tmp_path / "out", device="cpu", engine="both")
    nq = write_variant(tmp_path / "nq", "mla-no-q-lora")
    with pytest.raises(UnsupportedSourceError, match=r"field 'q_lora_rank'.*no engine serves it"):
        quantize_draft(nq, tmp_path / "out", device="cpu")            # --engine auto: refused only when none can
    assert not (tmp_path / "out").exists()


def test_inspect_says_which_engine_refuses_what(tmp_path):
    report = inspect_draft(write_variant(tmp_path / "q", "qwen3"))
    assert report.engines["vllm"] is None
    assert report.engines["sglang"].startswith("SGLang 0.5.23 refuses architectures: Eagle3Qwen3ForCausalLM")
    assert report.to_dict()["engines"] == report.engines
    assert inspect_draft(write_variant(tmp_path / "m", "mla")).engines == {"vllm": None, "sglang": None}


def test_every_rule_is_in_the_docs():
    table = (Path(__file__).resolve().parent.parent / "docs" / "families.md").read_text()
    section = table.split("## What the engines serve", 1)[1].split("\n## ", 1)[0]
    for rule in RULES:
        assert f"`{rule.field}`" in section, rule
