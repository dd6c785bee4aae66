"""Which hidden states vLLM 0.33 and SGLang 0.5.23 feed a draft (read from their code), and what the tools say."""

from __future__ import annotations

import json

import pytest
from eagle3_quant.calib.engine_taps import Engine, engine_taps, served_taps, tap_record

from eagle3_quant.errors import PipelineSpecError
from eagle3_quant.pipeline_spec import ENGINES, load_pipeline
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat

LAYERS = 8   # the "tiny" synthetic draft's target


def config(make_draft, fmt, **kw):
    return read_draft(make_draft(fmt, name=f"{fmt.value}-{kw.get('aux_layer_ids')}", **kw)).config


def test_nested_ids_vllm_reads_inputs_sglang_captures_outputs(make_draft):
    cfg = config(make_draft, DraftFormat.SPECFORGE, aux_layer_ids=[1, 3, 4])
    assert engine_taps(cfg, LAYERS, "vllm").indices == (1, 3, 4)      # hidden_states[L] as vLLM reads it
    assert engine_taps(cfg, LAYERS, "sglang").indices == (2, 4, 5)    # SGLang captures id + 1
    record = tap_record(cfg, LAYERS, "vllm")
    assert record.training_indices == (2, 4, 5)                       # SpecForge trained on layer outputs
    assert record.note == ("vllm feeds this draft hidden_states[1, 3, 4], but its config says it was trained on "
                           "hidden_states[2, 4, 5]: acceptance under vllm may be lower than trained")
    assert tap_record(cfg, LAYERS, "sglang").note is None


def test_top_level_ids_sglang_ignores_them_and_uses_its_defaults(make_draft):
    cfg = config(make_draft, DraftFormat.SPECULATORS, aux_layer_ids=[1, 3, 6])
    assert engine_taps(cfg, LAYERS, "vllm").indices == (1, 3, 6)
    assert engine_taps(cfg, LAYERS, "sglang").indices == (2, 4, 5)    # [2, L//2, L-3], no +1
    assert tap_record(cfg, LAYERS, "vllm").note is None
    assert "sglang feeds this draft hidden_states[2, 4, 5]" in tap_record(cfg, LAYERS, "sglang").note


def test_no_ids_both_engines_use_the_defaults(make_draft):
    cfg = config(make_draft, DraftFormat.EAGLE)
    assert {engine_taps(cfg, 61, e).indices for e in Engine} == {(2, 30, 58)}
    assert served_taps(cfg, 61) == {"training": [2, 30, 58], "vllm": [2, 30, 58], "sglang": [2, 30, 58],
                                    "notes": []}
    assert served_taps(cfg) == {"training": None, "vllm": None, "sglang": None, "notes": []}   # depth unknown


def test_pipeline_engine_is_checked(tmp_path):
    assert set(ENGINES) == set(Engine.__members__)
    base = {"pipeline_version": 1, "source": "org/d", "workdir": str(tmp_path), "push": {"enabled": False}}
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(base))
    assert load_pipeline(path).calibrate.engine == "vllm"
    path.write_text(json.dumps({**base, "calibrate": {"engine": "tgi"}}))
    with pytest.raises(PipelineSpecError, match="calibrate.engine.*'tgi' is not one of vllm, sglang"):
        load_pipeline(path)
