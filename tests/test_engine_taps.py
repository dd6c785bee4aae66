"""Which target layers vLLM (both model runners) and SGLang feed a draft, read from their code
(eagle3_quant/taps/), the trained layers, the candidates, and the ids `--serve-taps trained` writes."""

from __future__ import annotations

import json

import pytest
from tiny_pair_fixtures import PAIR

from eagle3_quant.cli import main
from eagle3_quant.errors import PipelineSpecError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.pipeline_spec import ENGINES, load_pipeline
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.taps.candidates import tap_candidates, trained_taps
from eagle3_quant.taps.capture import capture_taps
from eagle3_quant.taps.conventions import AUX_KEY
from eagle3_quant.taps.engine_rules import Engine, engine_feeds, engine_taps
from eagle3_quant.taps.summary import served_taps
from eagle3_quant.taps.written_ids import apply_written, served_config, with_raw

LAYERS = 8   # the "tiny" synthetic draft's target


def config(make_draft, fmt, **kw):
    return read_draft(make_draft(fmt, name=f"{fmt.value}-{kw.get('aux_layer_ids')}", **kw)).config


def feeds(cfg, layers):
    return {f.reader: f.indices for f in engine_feeds(cfg, layers)}


def test_nested_ids_vllm_reads_inputs_sglang_captures_outputs(make_draft):
    cfg = config(make_draft, DraftFormat.SPECFORGE, aux_layer_ids=[1, 3, 4])
    # V1 reads the nested ids as inputs; V2 does not read them (its defaults); SGLang captures id + 1
    assert feeds(cfg, LAYERS) == {"vllm": (1, 3, 4), "vllm_v2": (2, 4, 5), "sglang": (2, 4, 5)}
    assert engine_taps(cfg, LAYERS, "vllm").indices == (1, 3, 4)
    assert engine_taps(cfg, LAYERS, "sglang").indices == (2, 4, 5)
    assert trained_taps(cfg, LAYERS).indices == (2, 4, 5)            # SpecForge trained on layer outputs
    record = capture_taps(cfg, LAYERS, "vllm").record
    assert record.training_indices == (2, 4, 5) and record.note.startswith(
        "vllm feeds this draft hidden_states[1, 3, 4] as its config stands, but the config says it was trained on "
        "hidden_states[2, 4, 5]")
    assert capture_taps(cfg, LAYERS, "sglang").record.note is None
    assert [(c.name, c.indices) for c in tap_candidates(cfg, LAYERS)] == [
        ("trained=vllm_v2=sglang", (2, 4, 5)), ("vllm", (1, 3, 4))]


def test_the_tiny_pair_draft_disagrees_with_vllm_and_v2_cannot_run_it():
    cfg = read_draft(PAIR / "draft").config                          # nested [0, 1, 2], SpecForge style
    by_reader = {f.reader: f for f in engine_feeds(cfg, 4)}
    assert by_reader["vllm"].indices == (0, 1, 2) and by_reader["sglang"].indices == (1, 2, 3)
    assert by_reader["vllm_v2"].indices == (1, 2)                     # defaults (2, 2, 1): a layer twice
    assert "names a layer twice: 2 states fed, the fc reads 3" in by_reader["vllm_v2"].problem
    assert trained_taps(cfg, 4).indices == (1, 2, 3)
    assert [(c.name, c.indices) for c in tap_candidates(cfg, 4)] == [("trained=sglang", (1, 2, 3)),
                                                                      ("vllm", (0, 1, 2))]


def test_top_level_ids_sglang_ignores_them_and_uses_its_defaults(make_draft):
    cfg = config(make_draft, DraftFormat.SPECULATORS, aux_layer_ids=[1, 3, 6])
    assert feeds(cfg, LAYERS) == {"vllm": (1, 3, 6), "vllm_v2": (1, 3, 6), "sglang": (2, 4, 5)}   # no +1
    assert trained_taps(cfg, LAYERS).indices == (1, 3, 6)
    assert "sglang feeds this draft hidden_states[2, 4, 5]" in capture_taps(cfg, LAYERS, "sglang").record.note


def test_no_ids_the_training_defaults_of_both_counts_are_candidates(make_draft):
    cfg = config(make_draft, DraftFormat.EAGLE)
    assert feeds(cfg, 61) == {"vllm": (2, 30, 58), "vllm_v2": (2, 30, 58), "sglang": (2, 30, 58)}
    assert trained_taps(cfg, 61) is None                              # unknown: nothing in the config says
    assert [(c.name, c.indices) for c in tap_candidates(cfg, 61)] == [
        ("vllm=vllm_v2=sglang=defaults", (2, 30, 58)), ("specforge-defaults-as-inputs", (1, 29, 57)),
        ("defaults-as-outputs", (3, 31, 59))]
    assert feeds(cfg, None) == {"vllm": None, "vllm_v2": None, "sglang": None}     # depth unknown
    summary = served_taps(cfg, 61)
    assert (summary["training"], summary["vllm"], summary["sglang"], summary["notes"]) == (
        None, [2, 30, 58], [2, 30, 58], [])
    assert served_taps(cfg)["vllm"] is None


def test_serve_trained_writes_vllms_top_level_key_and_keeps_sglangs(make_draft):
    cfg = read_draft(PAIR / "draft").config
    served = served_config(cfg, (1, 2, 3), ("vllm", "sglang"), 4)
    assert served.written == {AUX_KEY: [1, 2, 3]} and served.before == {AUX_KEY: None}
    assert served.raw["eagle_config"] == cfg.raw["eagle_config"]      # SGLang already feeds [1, 2, 3]
    assert {f.reader: f.indices for f in served.feeds} == {"vllm": (1, 2, 3), "vllm_v2": (1, 2, 3),
                                                           "sglang": (1, 2, 3)}
    assert served.problems == ()
    assert apply_written(dict(cfg.raw), served.written) == served.raw
    # a measurement may say the nested ids count inputs: both keys are then written, in each engine's count
    nested = config(make_draft, DraftFormat.SPECFORGE, aux_layer_ids=[2, 4, 5])
    other = served_config(nested, (2, 4, 5), ("vllm", "sglang"), LAYERS)
    assert other.written == {"eagle_config." + AUX_KEY: [1, 3, 4], AUX_KEY: [2, 4, 5]}
    assert {f.indices for f in other.feeds} == {(2, 4, 5)}
    assert trained_taps(with_raw(nested, other.raw), LAYERS).indices == (2, 4, 5)    # the convention agrees now
    # SGLang counts outputs: the embeddings (hidden_states[0]) cannot be named in its count
    assert "hidden_states[0, 1, 2] starts with the embeddings" in served_config(cfg, (0, 1, 2), ("sglang",),
                                                                                 4).problems[0]
    assert served_config(cfg, (0, 1, 2), ("vllm",), 4).problems == ()


def test_a_draft_without_ids_gets_them_written(make_draft):
    cfg = config(make_draft, DraftFormat.EAGLE)
    served = served_config(cfg, (2, 4, 5), ("vllm",), LAYERS)        # the defaults, but written down
    assert served.written == {AUX_KEY: [2, 4, 5]} and "eagle_config" not in served.raw   # format kept (EAGLE)


def test_inspect_shows_each_engines_layers(make_draft, tmp_path, capsys):
    report = inspect_draft(PAIR / "draft", target=PAIR / "target")
    taps = report.taps
    assert taps["target_layers"] == 4 and taps["trained"] == [1, 2, 3]
    assert "SpecForge" in taps["trained_source"] and "output count" in taps["trained_source"]
    rows = {f["reader"]: f for f in taps["feeds"]}
    assert (rows["vllm"]["indices"], rows["vllm"]["source"]) == ([0, 1, 2], "eagle_config." + AUX_KEY)
    assert rows["vllm_v2"]["indices"] == [1, 2] and "twice" in rows["vllm_v2"]["problem"]
    assert (rows["sglang"]["indices"], rows["sglang"]["source"]) == ([1, 2, 3], f"eagle_config.{AUX_KEY}, + 1")
    assert "gpu_model_runner.py:5251" in rows["vllm"]["code"] and "vLLM 0.33.0" in rows["vllm"]["code"]
    assert "eagle3_utils.py:113" in rows["vllm_v2"]["code"] and "llama.py:929" in rows["sglang"]["code"]
    spec = inspect_draft(make_draft(DraftFormat.SPECULATORS, name="s", aux_layer_ids=[1, 3, 6])).taps
    assert spec["trained"] == [1, 3, 6] and {f["reader"]: f["indices"] for f in spec["feeds"]} == {
        "vllm": [1, 3, 6], "vllm_v2": [1, 3, 6], "sglang": None}     # SGLang's defaults need the depth
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 32}}))
    bare = inspect_draft(make_draft(DraftFormat.EAGLE, name="e"), target=target).taps
    assert bare["trained"] is None and bare["trained_source"].startswith("unknown")
    assert {f["reader"]: f["indices"] for f in bare["feeds"]} == {"vllm": [2, 16, 29], "vllm_v2": [2, 16, 29],
                                                                 "sglang": [2, 16, 29]}
    assert [c["indices"] for c in bare["candidates"]] == [[2, 16, 29], [1, 15, 28], [3, 17, 30]]
    with pytest.raises(SystemExit) as code:
        main(["inspect", str(PAIR / "draft"), "--target", str(PAIR / "target")])
    out = " ".join(capsys.readouterr().out.split())
    assert code.value.code == 0 and "vLLM, model runner V1 │ hidden_states[0, 1, 2] (not the trained layers)" in out
    assert "trained on │ hidden_states[1, 2, 3]" in out and "candidate vllm: hidden_states[0, 1, 2]" in out
    with pytest.raises(SystemExit):
        main(["inspect", str(PAIR / "draft"), "--json"])
    assert json.loads(capsys.readouterr().out)["taps"]["trained"] == [1, 2, 3]


def test_pipeline_engine_and_serve_taps_are_checked(tmp_path):
    assert set(ENGINES) == set(Engine.__members__)
    base = {"pipeline_version": 1, "source": "org/d", "workdir": str(tmp_path), "push": {"enabled": False}}
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(base))
    spec = load_pipeline(path)
    assert spec.calibrate.engine == "vllm" and spec.quantize.serve_taps == "trained"
    path.write_text(json.dumps({**base, "calibrate": {"engine": "tgi"}}))
    with pytest.raises(PipelineSpecError, match="calibrate.engine.*'tgi' is not one of vllm, sglang"):
        load_pipeline(path)
    path.write_text(json.dumps({**base, "quantize": {"serve_taps": "engine"}}))
    with pytest.raises(PipelineSpecError, match="serve_taps.*unknown value 'engine'; valid: trained, as-is"):
        load_pipeline(path)
