from __future__ import annotations

import pytest
import torch
from calib_capture_fixtures import DRAFT, DRAFT_IDS, TARGET, text_rows, write_jsonl

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.errors import TargetMismatchError
from eagle3_quant.records.calibration import load_calibration
from fixtures.synthetic import DraftShape, write_synthetic_draft

TAPS = tuple(i + 1 for i in DRAFT_IDS)   # SpecForge ids nested in eagle_config count layer outputs (SGLang's taps)
SMALL = {"num_samples": 5, "seq_len": 48, "min_tokens": 4, "generate_tokens": 0}


def layer_inputs(model, ids: torch.Tensor, layers: tuple[int, ...]) -> dict[int, torch.Tensor]:
    """What each decoder layer receives, caught by forward pre-hooks: the definition of a tap."""
    seen, handles = {}, []
    for k in layers:
        def hook(module, args, kwargs, k=k):
            seen[k] = (args[0] if args else kwargs["hidden_states"])[0].clone()
        handles.append(model.model.layers[k].register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0]
    finally:
        for h in handles:
            h.remove()
    seen["next"] = logits.argmax(-1)
    return seen


def test_stored_states_are_the_inputs_of_the_tapped_layers(tiny_target, tiny_draft, chat_jsonl, target_model,
                                                            tmp_path):
    """One pass stores the union of the candidates: vLLM's reading of the nested ids (hidden_states[0, 1, 2]) and
    the trained layers SGLang feeds ([1, 2, 3]); each candidate's states are rebuilt from it."""
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", engine="sglang", **SMALL)
    union = (0, 1, 2, 3)
    assert result.taps == union and result.tap_convention == "output" and result.tap_note is None
    assert result.samples == 5 and result.captured_samples == 5 and result.resumed_samples == 0
    calib = load_calibration(tmp_path / "cal")
    assert calib.info.aux_layer_ids == union and calib.info.target_hidden_size == TARGET.hidden
    assert {c["name"]: c["indices"] for c in calib.info.extra["tap_candidates"]} == {
        "trained=sglang": [1, 2, 3], "vllm": [0, 1, 2]}        # vLLM's model runner V2: defaults [2, 2, 1], refused
    assert calib.info.extra["target_layers"] == TARGET.layers
    assert calib.info.dtype == "float32" and result.tokens == calib.num_tokens > 0
    views = {taps: list(calib.select(taps).samples()) for taps in (TAPS, tuple(DRAFT_IDS))}
    for i, sample in enumerate(calib.samples()):
        t = sample.input_ids.shape[0]
        assert 4 <= t <= 48 and sample.generated_from is None
        assert sample.aux_hidden_states.shape == (t, 4 * TARGET.hidden)
        assert sample.target_next_ids.shape == (t,) and sample.target_next_ids.dtype == torch.int64
        expected = layer_inputs(target_model, sample.input_ids, union)
        for j, k in enumerate(union):
            chunk = sample.aux_hidden_states[:, j * TARGET.hidden:(j + 1) * TARGET.hidden]
            torch.testing.assert_close(chunk, expected[k], rtol=0, atol=1e-6)
        for taps, view in views.items():
            assert view[i].aux_hidden_states.shape == (t, 3 * TARGET.hidden)
            torch.testing.assert_close(view[i].aux_hidden_states, torch.cat([expected[k] for k in taps], -1),
                                       rtol=0, atol=1e-6)
        assert torch.equal(sample.target_next_ids, expected["next"])
    assert result.tokens_per_second > 0 and result.bytes == sum(
        (tmp_path / "cal" / s["file"]).stat().st_size for s in calib.shards)


def test_input_convention_override_moves_the_taps(tiny_target, tiny_draft, chat_jsonl, target_model, tmp_path):
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", tap_convention="input",
                              num_samples=2, seq_len=24, min_tokens=4)
    assert result.taps == tuple(DRAFT_IDS)
    sample = next(load_calibration(tmp_path / "cal").samples())
    with torch.no_grad():
        states = target_model(input_ids=sample.input_ids[None], output_hidden_states=True).hidden_states
    torch.testing.assert_close(sample.aux_hidden_states, torch.cat([states[k][0] for k in DRAFT_IDS], -1),
                               rtol=0, atol=1e-6)


def test_generated_continuation_is_the_targets_own(tiny_target, tiny_draft, chat_jsonl, tokenizer, tmp_path):
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", generate_tokens=6,
                              num_samples=3, seq_len=64, min_tokens=4, dtype="float32")
    assistant = tokenizer.convert_tokens_to_ids("<|assistant|>")
    assert result.generated_tokens + result.cut_generations > 0
    for sample in load_calibration(tmp_path / "cal").samples():
        g = sample.generated_from
        assert g is not None and int(sample.input_ids[g - 1]) == assistant    # the prompt asks for an answer
        assert sample.input_ids.shape[0] <= 64
        assert torch.equal(sample.input_ids[g:], sample.target_next_ids[g - 1:-1])


def test_same_seed_same_set_other_seed_other_prompts(tiny_target, tiny_draft, chat_jsonl, tmp_path):
    a = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "a", seed=3, **SMALL)
    b = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "b", seed=3, **SMALL)
    c = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "c", seed=4, **SMALL)
    for x, y in zip(load_calibration(a.path).samples(), load_calibration(b.path).samples(), strict=True):
        assert torch.equal(x.input_ids, y.input_ids) and torch.equal(x.aux_hidden_states, y.aux_hidden_states)
    assert a.info.extra["prompts_sha256"] == b.info.extra["prompts_sha256"] != c.info.extra["prompts_sha256"]


def test_text_dataset_and_bf16_storage(tiny_target, tiny_draft, tmp_path):
    data = write_jsonl(tmp_path / "t.jsonl", text_rows(10))
    result = calibrate_target(tiny_target, tiny_draft, data, tmp_path / "cal", dtype="bfloat16", **SMALL)
    sample = next(load_calibration(result.path).samples())
    assert result.dtype == "bfloat16" and sample.aux_hidden_states.dtype == torch.bfloat16
    assert result.info.extra["column"] == "text"


def test_draft_with_other_target_hidden_size_is_refused(tiny_target, chat_jsonl, tmp_path):
    shape = DraftShape(**{**DRAFT.__dict__, "target_hidden": 96})
    draft = write_synthetic_draft(tmp_path / "d96", shape, aux_layer_ids=DRAFT_IDS)
    with pytest.raises(TargetMismatchError, match="target_hidden_size.*expects target hidden size 96.*hidden_size 64"):
        calibrate_target(tiny_target, draft, chat_jsonl, tmp_path / "cal", **SMALL)
    assert not (tmp_path / "cal").exists() and not list(tmp_path.glob(".cal*"))


def test_draft_with_other_vocab_is_refused(tiny_target, chat_jsonl, tmp_path):
    shape = DraftShape(**{**DRAFT.__dict__, "vocab": 1000})
    draft = write_synthetic_draft(tmp_path / "dv", shape, aux_layer_ids=DRAFT_IDS)
    with pytest.raises(TargetMismatchError, match="field 'vocab_size'.*vocab of 1000.*vocab_size 512"):
        calibrate_target(tiny_target, draft, chat_jsonl, tmp_path / "cal", **SMALL)


def test_taps_past_the_last_layer_are_refused(tiny_target, chat_jsonl, tmp_path):
    draft = write_synthetic_draft(tmp_path / "d", DRAFT, aux_layer_ids=[1, 2, 3])   # output of layer 3 = past the end
    with pytest.raises(ValueError, match=r"layer id 3 \(output convention.*hidden_states\[4\].*0\.\.3"):
        calibrate_target(tiny_target, draft, chat_jsonl, tmp_path / "cal", engine="sglang", **SMALL)


def test_default_engine_vllm_reads_nested_ids_as_layer_inputs(tiny_target, tiny_draft, chat_jsonl, target_model,
                                                              tmp_path):
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", **{**SMALL, "num_samples": 2})
    assert result.taps == (0, 1, 2, 3)                          # both candidates, whatever the engine
    extra = result.info.extra
    assert extra["engine"] == "vllm" and extra["engine_aux_layer_ids"] == DRAFT_IDS
    assert extra["training_aux_layer_ids"] == list(TAPS) and extra["taps_override"] is False
    assert extra["training_convention"] == "output" and extra["tap_convention"] == "input"
    assert result.tap_note.startswith("vllm feeds this draft hidden_states[0, 1, 2] as its config stands, but the "
                                      "config says it was trained on hidden_states[1, 2, 3]: `validate` measures")
    sample = next(load_calibration(result.path).select(tuple(DRAFT_IDS)).samples())
    expected = layer_inputs(target_model, sample.input_ids, tuple(DRAFT_IDS))
    torch.testing.assert_close(sample.aux_hidden_states, torch.cat([expected[k] for k in DRAFT_IDS], -1),
                               rtol=0, atol=1e-6)


def test_default_options_append_the_targets_continuation(tiny_target, tiny_draft, chat_jsonl, tmp_path):
    result = calibrate_target(tiny_target, tiny_draft, chat_jsonl, tmp_path / "cal", num_samples=2, seq_len=48,
                              min_tokens=4)
    assert result.info.extra["generate_tokens"] == 12           # 64, at most a quarter of seq_len
    assert all(s.generated_from is not None for s in load_calibration(result.path).samples())
