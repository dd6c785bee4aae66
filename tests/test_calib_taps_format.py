from __future__ import annotations

import json

import pytest
import torch

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter, load_calibration
from eagle3_quant.taps.conventions import TapConvention, resolve_taps

LAYERS = 8   # the "tiny" synthetic draft's target


def config(make_draft, fmt, **kw):
    return read_draft(make_draft(fmt, name=f"{fmt.value}-{kw.get('aux_layer_ids')}", **kw)).config


def test_specforge_ids_count_layer_outputs(make_draft):
    taps = resolve_taps(config(make_draft, DraftFormat.SPECFORGE, aux_layer_ids=[1, 3, 4]), LAYERS)
    assert taps.convention is TapConvention.output and taps.ids == (1, 3, 4) and taps.indices == (2, 4, 5)
    assert "eagle_config" in taps.origin


def test_speculators_ids_count_layer_inputs(make_draft):
    taps = resolve_taps(config(make_draft, DraftFormat.SPECULATORS, aux_layer_ids=[2, 4, 5]), LAYERS)
    assert taps.convention is TapConvention.input and taps.indices == (2, 4, 5)


def test_defaults_are_the_same_tensors_in_both_conventions(make_draft):
    eagle = config(make_draft, DraftFormat.EAGLE)          # original EAGLE configs name no ids
    assert eagle.aux_layer_ids is None
    as_inputs = resolve_taps(eagle, LAYERS)
    as_outputs = resolve_taps(eagle, LAYERS, "output")
    assert as_inputs.indices == as_outputs.indices == (2, 4, 5)
    assert as_inputs.ids == (2, 4, 5) and as_outputs.ids == (1, 3, 4)
    assert resolve_taps(eagle, 61).indices == (2, 30, 58)


def test_explicit_convention_and_ids_override(make_draft):
    cfg = config(make_draft, DraftFormat.SPECFORGE, aux_layer_ids=[1, 3, 4])
    assert resolve_taps(cfg, LAYERS, "input").indices == (1, 3, 4)
    assert resolve_taps(cfg, LAYERS, ids=[0, 2, 6]).indices == (0, 2, 6)
    assert resolve_taps(cfg, LAYERS, "output", ids=[0, 2, 6]).indices == (1, 3, 7)


def test_bad_taps_are_named(make_draft):
    cfg = config(make_draft, DraftFormat.SPECULATORS, aux_layer_ids=[2, 4, 8])
    with pytest.raises(DraftFormatError, match=r"layer id 8 \(input convention.*0\.\.7.*--tap-convention"):
        resolve_taps(cfg, LAYERS)
    with pytest.raises(DraftFormatError, match="reads 3 target layers"):
        resolve_taps(cfg, LAYERS, ids=[1, 2])
    with pytest.raises(DraftFormatError, match="pass --target"):
        resolve_taps(config(make_draft, DraftFormat.EAGLE), None)


def sample(t: int, h: int = 4) -> CalibrationSample:
    ids = torch.arange(t)
    return CalibrationSample(ids, torch.randn(t, 3 * h), (ids + 1) % 7)


def test_writer_round_trip_by_bytes_and_incomplete_marking(tmp_path):
    info = CalibrationInfo("t", (1, 2, 3), 4, "float32", "src", {"seed": 1})
    writer = CalibrationWriter(tmp_path / "c", info, shard_samples=100, shard_bytes=400, mark_incomplete=True)
    written = [sample(t) for t in (3, 5, 2, 4)]
    for s in written:
        writer.add(s)
    # 64 bytes a token: 3 + 5 tokens pass 400 bytes and make a shard; 2 + 4 tokens are still pending
    assert [s["samples"] for s in writer.shards] == [[0, 1]]
    with pytest.raises(DraftFormatError, match="incomplete"):
        load_calibration(tmp_path / "c")
    writer.close()
    calib = load_calibration(tmp_path / "c")
    assert [s["samples"] for s in calib.shards] == [[0, 1], [2, 3]]
    assert calib.complete and calib.num_samples == 4 and calib.num_tokens == 14 and calib.info == info
    for a, b in zip(written, calib.samples(), strict=True):
        assert torch.equal(a.aux_hidden_states, b.aux_hidden_states) and torch.equal(a.input_ids, b.input_ids)
    assert not list((tmp_path / "c").glob("*.tmp"))


def test_index_without_complete_key_still_loads(tmp_path):
    writer = CalibrationWriter(tmp_path / "c", CalibrationInfo("t", (1, 2, 3), 4, "float32"))
    writer.add(sample(3))
    writer.flush()                                     # a plain writer leaves a loadable set after each flush
    assert load_calibration(tmp_path / "c").num_samples == 1
    index = json.loads((tmp_path / "c" / "calib.json").read_text())
    del index["complete"]                              # as version-1 writers before this key wrote it
    (tmp_path / "c" / "calib.json").write_text(json.dumps(index))
    assert load_calibration(tmp_path / "c").complete


def test_info_differences_name_fields():
    a = CalibrationInfo("t", (1, 2, 3), 4, extra={"seed": 1, "column": "text"})
    b = CalibrationInfo("t", (1, 2, 4), 4, extra={"seed": 2, "column": "text", "new": 1})
    assert a.differences(b) == ["aux_layer_ids", "extra.new", "extra.seed"]
    assert a.differences(a) == []


def test_sample_check_names_the_problem():
    ids = torch.arange(4)
    with pytest.raises(DraftFormatError, match=r"s0: target_next_ids must be an integer vector of length 4"):
        CalibrationSample(ids, torch.zeros(4, 12), ids[:3]).check(4, "s0")
    with pytest.raises(DraftFormatError, match="generated_from 9 outside 1..4"):
        CalibrationSample(ids, torch.zeros(4, 12), ids, 9).check(4, "s1")


def test_public_api_is_in_the_lazy_table():
    import eagle3_quant
    from eagle3_quant.calib.api import calibrate_target
    from eagle3_quant.calib.importer import import_calibration
    from eagle3_quant.calib.result import CalibrationResult

    assert eagle3_quant.calibrate_target is calibrate_target
    assert eagle3_quant.import_calibration is import_calibration
    assert eagle3_quant.CalibrationResult is CalibrationResult
    assert {"calibrate_target", "import_calibration", "CalibrationResult"} <= set(eagle3_quant.__all__)
