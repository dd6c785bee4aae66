"""Taps written out of layer order: vLLM 0.33 and SGLang 0.5.23 feed the draft the states in ascending layer
order, so capture, dump import and the calibration set hold them so (the old capture followed the ids' order)."""

from __future__ import annotations

import os

import pytest
import torch
from calib_capture_fixtures import DRAFT, TARGET
from test_calib_engine_dump import SGLANG_IDS, engine_states, write_dump

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.calib.importer import import_calibration
from eagle3_quant.errors import DraftFormatError, TargetMismatchError
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter, load_calibration
from eagle3_quant.taps.conventions import resolve_taps
from eagle3_quant.taps.engine_rules import engine_taps
from eagle3_quant.taps.summary import served_taps
from fixtures.synthetic import write_synthetic_draft

UNORDERED = [2, 0, 1]      # SpecForge ids (outputs of layers 2, 0, 1) = hidden_states 3, 1, 2 under SGLang
ASCENDING = (1, 2, 3)


@pytest.fixture(scope="module")
def unordered_draft(tmp_path_factory):
    return write_synthetic_draft(tmp_path_factory.mktemp("unordered") / "d", DRAFT, aux_layer_ids=UNORDERED)


def chunks(aux: torch.Tensor) -> list[torch.Tensor]:
    return list(aux.split(TARGET.hidden, dim=-1))


def test_both_engines_taps_are_ascending_and_the_order_is_noted(make_draft):
    cfg = read_draft(make_draft(DraftFormat.SPECULATORS, aux_layer_ids=[5, 1, 3])).config
    taps = engine_taps(cfg, 8, "vllm")
    assert taps.indices == (1, 3, 5) and taps.ids == (1, 3, 5) and taps.written == (5, 1, 3)
    assert "aux layer ids [5, 1, 3]" in taps.order_note and "ascending, hidden_states[1, 3, 5]" in taps.order_note
    nested = read_draft(make_draft(DraftFormat.SPECFORGE, name="nested", aux_layer_ids=[4, 0, 2])).config
    assert engine_taps(nested, 8, "sglang").indices == (1, 3, 5) == resolve_taps(nested, 8).indices
    assert engine_taps(nested, 8, "vllm").indices == (0, 2, 4)
    assert served_taps(nested, 8)["notes"][-1].startswith("aux layer ids [4, 0, 2]")
    assert resolve_taps(nested, 8, ids=[0, 2, 4]).order_note is None


def test_a_repeated_tap_is_refused_in_one_line(make_draft):
    cfg = read_draft(make_draft(DraftFormat.SPECULATORS, aux_layer_ids=[1, 3, 3])).config
    with pytest.raises(DraftFormatError, match=r"taps hidden_states\[3\] more than once \(\[1, 3, 3\]\): vLLM and "
                                               r"SGLang capture a layer once") as err:
        engine_taps(cfg, 8, "vllm")
    assert "\n" not in err.value.message


def test_vllms_own_aux_collection_is_ascending():
    """vLLM 0.33's EagleModelMixin (every Llama/Qwen target) sorts the ids and appends as its layers run."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.model_executor.models.interfaces import EagleModelMixin
    except Exception:
        pytest.skip("vLLM is not installed (make setup-vllm): its aux collection cannot run here")
    model = EagleModelMixin()
    model._set_aux_hidden_state_layers((3, 1, 2))
    collected: list[torch.Tensor] = []
    for idx in range(TARGET.layers + 1):      # LlamaModel.forward: start layer, then idx + 1 after each layer
        model._maybe_add_hidden_state(collected, idx, torch.full((1,), float(idx)), None)
    assert [int(t) for t in collected] == list(ASCENDING)


def test_capture_stores_the_states_in_ascending_layer_order(tiny_target, unordered_draft, chat_jsonl, target_model,
                                                            tmp_path):
    result = calibrate_target(tiny_target, unordered_draft, chat_jsonl, tmp_path / "cal", engine="sglang",
                              num_samples=2, seq_len=32, min_tokens=4)
    union = (0, 1, 2, 3)          # vLLM's reading hidden_states[0, 1, 2] and the trained (SGLang's) [1, 2, 3]
    assert result.taps == union and result.info.aux_layer_ids == union
    assert result.tap_note is None and len(result.tap_notes) == 1 and "[2, 0, 1]" in result.tap_notes[0]
    calib = load_calibration(tmp_path / "cal")
    for sample, view in zip(calib.samples(), calib.select(ASCENDING).samples(), strict=True):
        with torch.no_grad():
            states = target_model(input_ids=sample.input_ids[None], output_hidden_states=True).hidden_states
        for chunk, k in zip(chunks(sample.aux_hidden_states), union, strict=True):
            torch.testing.assert_close(chunk, states[k][0], rtol=0, atol=1e-6)
        for chunk, k in zip(chunks(view.aux_hidden_states), ASCENDING, strict=True):
            torch.testing.assert_close(chunk, states[k][0], rtol=0, atol=1e-6)


def test_vllm_dump_import_keeps_the_engines_order(tiny_target, unordered_draft, target_model, tmp_path):
    ids = torch.arange(3, 12)
    dump = write_dump(tmp_path / "dump", target_model, [ids], SGLANG_IDS)
    import_calibration(dump, unordered_draft, tmp_path / "out", target=tiny_target, engine="sglang")
    sample = next(load_calibration(tmp_path / "out").samples())
    stacked = engine_states(target_model, ids, SGLANG_IDS)          # [T, 4, H], ascending, final last
    for j, chunk in enumerate(chunks(sample.aux_hidden_states)):
        torch.testing.assert_close(chunk, stacked[:, j], rtol=0, atol=0)


def test_a_set_in_the_old_order_is_refused_with_the_reason(unordered_draft, tmp_path):
    info = CalibrationInfo("t", (3, 1, 2), TARGET.hidden, "float32", source="old capture")
    writer = CalibrationWriter(tmp_path / "old", info)
    ids = torch.arange(5)
    writer.add(CalibrationSample(ids, torch.zeros(5, 3 * TARGET.hidden), ids))
    writer.close()
    with pytest.raises(TargetMismatchError, match=r"holds hidden_states\[3, 1, 2\].*reads hidden_states\[1, 2, 3\]"
                                                  r".*same layers in another order"):
        import_calibration(tmp_path / "old", unordered_draft, tmp_path / "out", engine="sglang")
