from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from calib_capture_fixtures import DRAFT, DRAFT_IDS, TARGET

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.calib.importer import import_calibration
from eagle3_quant.cli import main
from eagle3_quant.errors import CalibrationDataError, DraftFormatError, TargetMismatchError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter, load_calibration
from fixtures.synthetic import write_synthetic_draft

SPECFORGE_INDICES = [0, 1, 2, 10]   # numeric order differs from the names' order


class NotATensor:
    pass


@pytest.fixture(scope="module")
def captured(tiny_target, tiny_draft, chat_jsonl, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("captured") / "cal"
    calibrate_target(tiny_target, tiny_draft, chat_jsonl, out, num_samples=4, seq_len=40, min_tokens=4,
                     generate_tokens=0, engine="sglang")        # SGLang feeds a SpecForge draft its trained taps
    return out


@pytest.fixture(scope="module")
def trained_only(captured, tmp_path_factory) -> Path:
    """The captured set narrowed to the trained taps hidden_states[1, 2, 3] (what a set captured before the
    candidates were stored together holds)."""
    calib = load_calibration(captured).select((1, 2, 3))
    extra = {k: v for k, v in calib.info.extra.items() if k != "tap_candidates"}
    out = tmp_path_factory.mktemp("trained-only") / "cal"
    writer = CalibrationWriter(out, replace(calib.info, extra=extra))
    for sample in calib.samples():
        writer.add(sample)
    writer.close()
    return out


def write_specforge_dump(folder: Path, model, prompts: list[torch.Tensor], pad: int = 3) -> Path:
    """What SpecForge's prepare_hidden_states.py writes: torch.save'd dicts, batch dim 1, right-padded ids."""
    for idx, ids in zip(SPECFORGE_INDICES, prompts, strict=True):
        with torch.no_grad():
            states = model(input_ids=ids[None], output_hidden_states=True).hidden_states
        group = folder / (f"rows_{idx // 2 * 2}-{idx // 2 * 2 + 2}")
        group.mkdir(parents=True, exist_ok=True)
        torch.save({"input_ids": torch.cat([ids, torch.zeros(pad, dtype=torch.int64)]),
                    "loss_mask": torch.ones(len(ids) + pad, dtype=torch.int64),
                    "hidden_state": states[-1].clone(),                        # after the final norm
                    "aux_hidden_state": torch.cat([states[k + 1] for k in DRAFT_IDS], -1)}, group / f"data_{idx}.ckpt")
    return folder


def test_specforge_dump_converts_to_the_same_set(captured, tiny_target, tiny_draft, target_model, tmp_path):
    reference = list(load_calibration(captured).select((1, 2, 3)).samples())
    dump = write_specforge_dump(tmp_path / "sf", target_model, [s.input_ids for s in reference])
    result = import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    assert result.samples == 4 and result.taps == (1, 2, 3) and result.info.extra["format"] == "specforge-offline"
    for ours, theirs in zip(reference, load_calibration(tmp_path / "out").samples(), strict=True):
        assert torch.equal(ours.input_ids, theirs.input_ids)             # padding dropped
        torch.testing.assert_close(ours.aux_hidden_states, theirs.aux_hidden_states, rtol=0, atol=1e-6)
        assert torch.equal(ours.target_next_ids, theirs.target_next_ids)  # lm_head(last hidden) == target's argmax


def test_specforge_dump_needs_the_target(captured, tiny_draft, target_model, tmp_path):
    dump = write_specforge_dump(tmp_path / "sf", target_model,
                                [s.input_ids for s in load_calibration(captured).samples()])
    with pytest.raises(CalibrationDataError, match="pass --target"):
        import_calibration(dump, tiny_draft, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_specforge_file_with_code_is_refused_unrun(tiny_target, tiny_draft, tmp_path):
    (tmp_path / "sf").mkdir()
    torch.save({"input_ids": torch.arange(4), "aux_hidden_state": NotATensor(), "hidden_state": torch.zeros(4, 64)},
               tmp_path / "sf" / "data_0.ckpt")
    with pytest.raises(CalibrationDataError, match=r"data_0\.ckpt: cannot read as a SpecForge hidden-state file"):
        import_calibration(tmp_path / "sf", tiny_draft, tmp_path / "out", target=tiny_target)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_calibration_format_dump_is_checked_and_copied(captured, tiny_draft, tmp_path):
    result = import_calibration(captured, tiny_draft, tmp_path / "out")
    assert result.samples == 4 and result.info.extra["imported_from"] == str(captured)
    for a, b in zip(load_calibration(captured).samples(), load_calibration(tmp_path / "out").samples(), strict=True):
        assert torch.equal(a.aux_hidden_states, b.aux_hidden_states) and torch.equal(a.input_ids, b.input_ids)


def test_dump_for_other_taps_is_refused(trained_only, tmp_path):
    other = write_synthetic_draft(tmp_path / "d", DRAFT, DraftFormat.SPECULATORS, aux_layer_ids=[0, 1, 2])
    with pytest.raises(TargetMismatchError, match=r"holds hidden_states\[1, 2, 3\].*reads hidden_states\[0, 1, 2\]"):
        import_calibration(trained_only, other, tmp_path / "out", engine="vllm")


def test_engine_dump_with_a_bad_sample_names_it(tiny_draft, tmp_path):
    info = CalibrationInfo("engine-target", (1, 2, 3), TARGET.hidden, "bfloat16", source="my-engine")
    writer = CalibrationWriter(tmp_path / "dump", info)
    ids = torch.arange(5)
    writer.add(CalibrationSample(ids, torch.zeros(5, 3 * TARGET.hidden, dtype=torch.bfloat16), ids))
    writer.add(CalibrationSample(ids, torch.zeros(5, 3 * TARGET.hidden - 2, dtype=torch.bfloat16), ids))
    writer.close()
    with pytest.raises(DraftFormatError, match=r"sample 1: aux_hidden_states shape \(5, 190\), expected \(5, 192\)"):
        import_calibration(tmp_path / "dump", tiny_draft, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_from_dump(captured, tiny_target, tiny_draft, tmp_path, capsys):
    with pytest.raises(SystemExit) as code:
        main(["calibrate", str(tmp_path / "out"), "--draft", str(tiny_draft), "--from-dump", str(captured),
              "--target", str(tiny_target)])
    assert code.value.code == 0 and "4 samples" in capsys.readouterr().out
    with pytest.raises(SystemExit) as code:
        main(["calibrate", str(tmp_path / "o2"), "--draft", str(tiny_draft), "--from-dump", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "neither a calibration set" in err and err.count("\n") == 1


def test_dump_records_its_engine_and_another_engine_is_refused(trained_only, tiny_draft, tmp_path):
    result = import_calibration(trained_only, tiny_draft, tmp_path / "out")    # the dump records engine sglang
    assert result.taps == (1, 2, 3) and result.info.extra["engine"] == "sglang" and result.tap_note is None
    assert [c["indices"] for c in result.info.extra["tap_candidates"]] == [[1, 2, 3]]   # the one it holds
    with pytest.raises(TargetMismatchError, match=r"holds hidden_states\[1, 2, 3\], the draft reads "
                                                  r"hidden_states\[0, 1, 2\].*as vLLM, model runner V1 reads it"):
        import_calibration(trained_only, tiny_draft, tmp_path / "o2", engine="vllm")


def test_a_set_of_every_candidate_imports_for_either_engine(captured, tiny_draft, tmp_path):
    result = import_calibration(captured, tiny_draft, tmp_path / "out", engine="vllm")
    assert result.taps == (0, 1, 2, 3) and result.info.extra["engine"] == "vllm"
    assert {c["name"]: c["indices"] for c in result.info.extra["tap_candidates"]} == {
        "trained=sglang": [1, 2, 3], "vllm": [0, 1, 2]}
