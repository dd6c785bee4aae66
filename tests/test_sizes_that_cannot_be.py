"""Sizes that cannot be, refused where each is read, with one typed error naming the file and field:
- JSON nested past 64 levels, in every record and every JSON a draft, target or artifact brings (the one limited
  reader, `reading/limits.py`, which counts the nesting without recursing, before json parses anything);
- a draft config whose layer count is not the one decoder layer its weights hold (vLLM builds as many as it says);
- a hidden-state sample that is not finite or whose file declares more than a sample may hold, in every dump
  format (`records/sample_limits.py`), refused before the bytes are read: a sparse file declaring gigabytes costs
  no disk here, and the reading process is measured not to grow."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from calib_capture_fixtures import TARGET
from corpus.builders import tree_state
from safetensors.torch import save_file

from eagle3_quant.calib.importer import import_calibration
from eagle3_quant.cli import main
from eagle3_quant.errors import CalibrationDataError, CheckpointFileError, DraftFormatError, EstimateInputError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.reading.safetensors_header import DTYPE_SIZES
from eagle3_quant.records import sample_limits
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter, load_calibration
from eagle3_quant.util import resources
from fixtures.synthetic import write_synthetic_draft

DEEP = "[" * 100_000 + "]" * 100_000


def cli(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


def one_error_line(err: str, *parts: str) -> None:
    lines = err.splitlines()
    assert lines[-1].startswith("error: ") and sum(x.startswith("error: ") for x in lines) == 1, err
    assert "Traceback" not in err and all(p in lines[-1] for p in parts), (parts, err)


# --- JSON nested deeper than 64 levels ------------------------------------------------------------------------

def test_the_reader_counts_the_nesting_without_recursing():
    from eagle3_quant.reading.limits import loads_strict

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(120)           # json itself would need ~100,000 frames for DEEP
    try:
        with pytest.raises(DraftFormatError, match="x.json: JSON nested deeper than 64 levels: refused"):
            loads_strict(DEEP, "x.json")
    finally:
        sys.setrecursionlimit(limit)
    assert loads_strict("[" * 64 + "]" * 64, "x.json") is not None
    with pytest.raises(DraftFormatError, match="deeper than 64"):
        loads_strict('{"a": ' * 65 + "1" + "}" * 65, "x.json")


def _deep(path: Path) -> Path:
    path.write_text(DEEP)
    return path


@pytest.mark.parametrize("read, error, says", [
    (lambda d: load_calibration(_deep(d / "calib.json").parent), DraftFormatError,
     "calib.json: not a calibration set (JSON nested deeper than 64 levels"),
    (lambda d: __import__("eagle3_quant.reading.config", fromlist=["x"]).read_config_file(_deep(d / "config.json")),
     DraftFormatError, "config.json: JSON nested deeper than 64 levels"),
    (lambda d: __import__("eagle3_quant.reading.checkpoint", fromlist=["x"]).read_weight_map(
        _deep(d / "model.safetensors.index.json")), CheckpointFileError, "shard index is not valid JSON (JSON nested"),
    (lambda d: __import__("eagle3_quant.speedup", fromlist=["x"]).read_report_acceptance(
        _deep(d / "validation.json")), EstimateInputError, "validation.json: JSON nested deeper than 64 levels"),
], ids=["calib.json", "config.json", "shard index", "validation.json (estimate)"])
def test_each_record_reader_refuses_deep_json(read, error, says, tmp_path):
    with pytest.raises(error) as info:
        read(tmp_path)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_the_readers_that_never_raise_read_deep_json_as_unreadable(tmp_path):
    from eagle3_quant.reading.source_card import source_card_info
    from eagle3_quant.records.public_names import LOCAL_RECORD, recorded_source_path
    from eagle3_quant.records.validation_report import read_validation

    _deep(tmp_path / "validation.json")
    summary = read_validation(tmp_path)
    assert summary.state == "unreadable" and "nested deeper than 64 levels" in summary.problem
    _deep(tmp_path / LOCAL_RECORD)
    assert recorded_source_path(tmp_path) is None
    _deep(tmp_path / "config.json")
    (tmp_path / "README.md").write_text("---\na: &a [x, x, x]\nb: [*a, *a, *a]\nlicense: mit\n---\n")
    assert source_card_info(tmp_path) == {}           # an alias is refused by the limited YAML reader: no license
    (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a draft\n")
    assert source_card_info(tmp_path) == {"license": "apache-2.0"}


def test_cli_refuses_deep_json_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = write_synthetic_draft(tmp_path / "src", "tiny", shards=2)
    _deep(src / "model.safetensors.index.json")
    before = tree_state(tmp_path)
    code, err = cli(["inspect", str(src)], capsys)
    assert code == 2 and tree_state(tmp_path) == before
    one_error_line(err, "model.safetensors.index.json", "nested deeper than 64 levels")
    draft = write_synthetic_draft(tmp_path / "draft", "tiny")
    cal = tmp_path / "cal"
    cal.mkdir()
    _deep(cal / "calib.json")
    before = tree_state(tmp_path)
    code, err = cli(["calibrate", str(tmp_path / "out"), "--draft", str(draft), "--from-dump", str(cal)], capsys)
    assert code == 2
    one_error_line(err, "calib.json", "nested deeper than 64 levels")
    assert tree_state(tmp_path) == before


def test_a_prompts_row_nested_past_the_parser_is_refused(tmp_path):
    from eagle3_quant.calib.dataset import check_json_rows

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"text": "a"}\n' + DEEP + "\n")
    with pytest.raises(CalibrationDataError, match=r"prompts\.jsonl: line 2 is JSON nested too deeply"):
        check_json_rows(path)


# --- a draft config's sizes against its weights ---------------------------------------------------------------

def _with_layers(root: Path, fmt: DraftFormat, value) -> Path:
    src = write_synthetic_draft(root / "src", "tiny", fmt)
    config = json.loads((src / "config.json").read_text())
    (config["transformer_layer_config"] if fmt is DraftFormat.SPECULATORS else config)["num_hidden_layers"] = value
    (src / "config.json").write_text(json.dumps(config))
    return src


@pytest.mark.parametrize("fmt", [DraftFormat.SPECFORGE, DraftFormat.SPECULATORS], ids=lambda f: f.value)
@pytest.mark.parametrize("value", [1_000_000_000, 0, 2, "1", 1.0, True, None])
def test_the_layer_count_must_be_the_one_layer_the_weights_hold(fmt, value, tmp_path):
    from eagle3_quant.reading.draft import read_draft

    src = _with_layers(tmp_path, fmt, value)
    if value is None:                     # null: as good as absent
        assert read_draft(src).config.hidden_size == 64
        return
    field = ("transformer_layer_config." if fmt is DraftFormat.SPECULATORS else "") + "num_hidden_layers"
    with pytest.raises(DraftFormatError) as info:
        read_draft(src)
    assert str(info.value) == (f"{src / 'config.json'}: field '{field}': {value!r} decoder layers, but the weights "
                               "hold 1 (an Eagle3 draft has one; vLLM would build as many as this says)")


@pytest.mark.parametrize("verb", ["inspect", "cost", "quantize"])
def test_no_verb_reads_past_an_absurd_layer_count(verb, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = _with_layers(tmp_path, DraftFormat.SPECFORGE, 1_000_000_000)
    before = tree_state(tmp_path)
    code, err = cli([verb, str(src), *([str(tmp_path / "out")] if verb == "quantize" else [])], capsys)
    assert code == 2
    one_error_line(err, "config.json", "field 'num_hidden_layers'", "1000000000 decoder layers")
    assert tree_state(tmp_path) == before           # no OUT, no partial folder, the source untouched


def test_aux_layer_ids_are_bounded(tmp_path):
    from eagle3_quant.reading.draft import read_draft

    src = write_synthetic_draft(tmp_path / "src", "tiny")
    config = json.loads((src / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 2, 10**12]
    (src / "config.json").write_text(json.dumps(config))
    with pytest.raises(DraftFormatError, match=r"field 'eagle_aux_hidden_state_layer_ids': \[1, 2, 1000000000000\] "
                                               r"is not a list of layer indices \(an integer in 0\.\.100000\)"):
        read_draft(src)


# --- hidden-state samples: finite, and bounded before they are read --------------------------------------------

def _specforge(folder: Path, **change) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"input_ids": torch.arange(6), "loss_mask": torch.ones(6, dtype=torch.int64),
              "hidden_state": torch.randn(1, 6, TARGET.hidden),
              "aux_hidden_state": torch.randn(1, 6, 3 * TARGET.hidden)}
    torch.save({**record, **change}, folder / "data_0.ckpt")
    return folder


def _engine(folder: Path, name: str, states: torch.Tensor) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"hidden_states": states, "token_ids": torch.arange(states.shape[0])}, str(folder / name))
    return folder


def _calibration(folder: Path, states: torch.Tensor) -> Path:
    writer = CalibrationWriter(folder, CalibrationInfo("t", (1, 2, 3), TARGET.hidden))
    writer.add(CalibrationSample(torch.arange(6), torch.zeros(6, 3 * TARGET.hidden), torch.arange(6)))
    writer.close()
    shard = folder / "shard-00000.safetensors"
    save_file({"input_ids.0": torch.arange(6), "aux_hidden_states.0": states, "target_next_ids.0": torch.arange(6)},
              str(shard))
    return folder


def _nan(shape) -> torch.Tensor:
    values = torch.randn(*shape)
    values.view(-1)[7] = float("nan")
    return values


@pytest.mark.parametrize("build, field", [
    (lambda d: _specforge(d, hidden_state=_nan((1, 6, TARGET.hidden))), "hidden_state"),
    (lambda d: _specforge(d, aux_hidden_state=_nan((1, 6, 3 * TARGET.hidden)) * math.inf), "aux_hidden_state"),
    (lambda d: _engine(d, "req-0.safetensors", _nan((6, 4, TARGET.hidden))), "hidden_states"),
    (lambda d: _engine(d / "hidden_states", "hs_0.safetensors", _nan((6, 4, TARGET.hidden)) * -math.inf),
     "hidden_states"),
    (lambda d: _calibration(d, _nan((6, 3 * TARGET.hidden))), "aux_hidden_states"),
], ids=["specforge-hidden", "specforge-aux", "vllm", "speculators", "calibration"])
def test_every_dump_format_takes_the_same_finite_check(build, field, tiny_target, tiny_draft, tmp_path, monkeypatch,
                                                       capsys):
    monkeypatch.chdir(tmp_path)
    dump = build(tmp_path / "dump")
    before = tree_state(tmp_path)
    code, err = cli(["calibrate", str(tmp_path / "out"), "--draft", str(tiny_draft), "--target", str(tiny_target),
                     "--from-dump", str(dump)], capsys)
    assert code == 2
    one_error_line(err, f"field '{field}'", f"{field} hold", "NaN/Inf value(s); expected finite states")
    assert tree_state(tmp_path) == before


def sparse_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    """A safetensors file whose header declares these tensors and whose data is a hole: no disk, no memory."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * DTYPE_SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return path


POSITIONS = 6_500_000       # x 4 states x hidden 64 in bfloat16, plus the ids: 3.4 GB declared


def _peak_growth(code: str) -> tuple[str, int]:
    """Run `code` in a fresh interpreter after its imports; (what it printed, peak RSS growth in bytes)."""
    program = ("import resource\nfrom eagle3_quant.calib.importer import import_calibration\n"
               "from eagle3_quant.records.calibration import load_calibration\n"
               "from eagle3_quant.errors import Eagle3QuantError\n"
               "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
               f"try:\n    {code}\nexcept Eagle3QuantError as exc:\n    print('refused:', exc)\n"
               "print('grew', (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)\n")
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    return "\n".join(lines[:-1]), int(lines[-1].split()[1])


def test_an_engine_dump_declaring_gigabytes_is_refused_before_reading(tiny_target, tiny_draft, tmp_path):
    dump = tmp_path / "dump"
    sparse_safetensors(dump / "req-0.safetensors", {"token_ids": ("I64", [POSITIONS]),
                                                    "hidden_states": ("BF16", [POSITIONS, 4, TARGET.hidden])})
    said, grew = _peak_growth(f"import_calibration({str(dump)!r}, {str(tiny_draft)!r}, {str(tmp_path / 'out')!r}, "
                              f"target={str(tiny_target)!r})")
    assert said == (f"refused: {dump / 'req-0.safetensors'}: declares 3.38 GB for one sample, more than the 2.15 GB a "
                    "sample may hold: refused before reading")
    assert grew < 200 * 2**20, grew           # read, it would have taken 3.4 GB
    assert not (tmp_path / "out").exists()


def test_a_calibration_shard_declaring_gigabytes_is_refused_before_reading(tmp_path):
    cal = _calibration(tmp_path / "cal", torch.zeros(6, 3 * TARGET.hidden))
    sparse_safetensors(cal / "shard-00000.safetensors", {
        "input_ids.0": ("I64", [POSITIONS]), "aux_hidden_states.0": ("BF16", [POSITIONS, 3 * TARGET.hidden]),
        "target_next_ids.0": ("I64", [POSITIONS])})
    said, grew = _peak_growth(f"list(load_calibration({str(cal)!r}).samples())")
    assert said.startswith(f"refused: {cal / 'shard-00000.safetensors'} sample 0: declares 2.60 GB for one sample")
    assert grew < 200 * 2**20, grew


def test_a_specforge_file_is_bounded_by_what_its_archive_declares(tiny_target, tiny_draft, tmp_path, monkeypatch):
    dump = _specforge(tmp_path / "dump")
    file = dump / "data_0.ckpt"
    monkeypatch.setattr(sample_limits, "MAX_SAMPLE_BYTES", 1000)
    with pytest.raises(CalibrationDataError, match=r"data_0\.ckpt: declares \d.* MB for one sample, more than the "
                                                   r"0\.001 MB a sample may hold: refused before reading"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
    monkeypatch.undo()
    bomb = tmp_path / "bomb" / "data_0.ckpt"          # a record stored compressed: a zip bomb, not torch.save's
    bomb.parent.mkdir()
    with zipfile.ZipFile(file) as plain, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as packed:
        for record in plain.infolist():
            packed.writestr(record.filename, plain.read(record.filename))
    with pytest.raises(CalibrationDataError, match=r"data_0\.ckpt: record '.*' declares \d+ bytes in a \d+-byte file "
                                                   r"\(compressed\): not what torch\.save writes"):
        import_calibration(bomb.parent, tiny_draft, tmp_path / "out", target=tiny_target)
    assert not (tmp_path / "out").exists()


def test_a_sample_the_free_memory_cannot_hold_is_refused(tiny_target, tiny_draft, tmp_path, monkeypatch):
    dump = _engine(tmp_path / "dump", "req-0.safetensors", torch.randn(6, 4, TARGET.hidden))
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: 1000)
    with pytest.raises(resources.ResourceError, match=r"req-0\.safetensors: reading this sample needs about "
                                                      r"0\.00\d+ MB of memory, 0\.001 MB available"):
        import_calibration(dump, tiny_draft, tmp_path / "out", target=tiny_target)
