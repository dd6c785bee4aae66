"""A calibration set whose token ids lie beyond the draft's embedding is refused in one line, naming the field,
by every verb that reads it (issue 23: `sensitivity --calib` ended in an IndexError traceback)."""

from __future__ import annotations

import pytest
from calib_fixtures import write_calibration, write_target

from eagle3_quant.cli import main
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.records.calibration import load_calibration


@pytest.fixture
def foreign_set(make_draft, tmp_path):
    """A tiny draft (target vocabulary 512) and a set captured with a 900-token vocabulary."""
    src = make_draft()
    target = write_target(tmp_path / "target")
    return src, write_calibration(tmp_path / "cal", target, samples=2, seq_len=20, vocab=900)


def _cli_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err     # one line, no traceback
    return err[0]


def test_check_names_the_first_sample_and_id_beyond_the_vocabulary(foreign_set):
    _, cal = foreign_set
    calib = load_calibration(cal)
    first = next(calib.samples())
    expected = int(first.input_ids.max())
    assert expected >= 512
    with pytest.raises(DraftFormatError) as caught:
        calib.check_token_ids(512, "the draft's target")
    assert caught.value.field == "input_ids.0"
    assert f"token id {expected} " in caught.value.message and "vocab_size 512" in caught.value.message
    calib.check_token_ids(900, "the draft's target")         # every id < 900: passes


def test_sensitivity_refuses_ids_beyond_the_embedding_in_one_line(foreign_set, capsys):
    src, cal = foreign_set
    line = _cli_error(["sensitivity", str(src), "--calib", str(cal), "--device", "cpu"], capsys)
    assert "field 'input_ids.0'" in line and "vocab_size 512" in line and "shard-00000.safetensors" in line


def test_static_quantize_refuses_the_same_set_before_any_work(foreign_set, tmp_path, capsys):
    src, cal = foreign_set
    out = tmp_path / "out"
    line = _cli_error(["quantize", str(src), str(out), "--scheme", "fp8", "--calib", str(cal), "--device", "cpu"],
                      capsys)
    assert "field 'input_ids.0'" in line
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_in_range_ids_with_out_of_range_next_tokens_are_named_too(tmp_path):
    target = write_target(tmp_path / "target")
    cal = write_calibration(tmp_path / "cal", target, samples=1, seq_len=12, vocab=512)
    from safetensors.torch import load_file, save_file

    shard = cal / "shard-00000.safetensors"
    tensors = load_file(shard)
    tensors["target_next_ids.0"][3] = 700
    save_file(tensors, shard)
    with pytest.raises(DraftFormatError) as caught:
        load_calibration(cal).check_token_ids(512, "the draft's target")
    assert caught.value.field == "target_next_ids.0" and "token id 700 " in caught.value.message
