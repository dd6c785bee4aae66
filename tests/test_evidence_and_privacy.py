"""Evidence belongs to its artifact, nothing private is published, parsers have limits (round two of issue 15)."""

from __future__ import annotations

import json
import shutil
import struct
import time

import pytest

from eagle3_quant.errors import CheckpointFileError, NotValidatedError, OptionsError, PipelineSpecError
from eagle3_quant.export.card import make_card
from eagle3_quant.export.push import push_draft
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.reading.limits import load_yaml_text, loads_strict
from eagle3_quant.reading.repo_ids import is_repo_id
from eagle3_quant.reading.safetensors_header import MAX_HEADER_BYTES, read_header
from eagle3_quant.records.public_names import LOCAL_RECORD, public_name
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.report import Gates
from fixtures.synthetic import write_synthetic_draft


@pytest.fixture
def validated(tmp_path):
    """A local source quantized and validated (data-free, kernel check off): (src, out)."""
    src = write_synthetic_draft(tmp_path / "home" / "alice" / "my-draft", "tiny")
    out = quantize_draft(src, tmp_path / "fp8", device="cpu").output
    report = validate_draft(out, kernel=False)
    assert report.passed, report.failed_checks
    return src, out


NAMES = {"target": "org/target", "base_model": "alice/my-draft"}     # the card's: a local source records none


def published_text(out) -> str:
    """Everything push would upload (manifest, validation report, card), as text."""
    result = push_draft(out, "org/draft-fp8", dry_run=True, **NAMES, allow_unmeasured=True)   # no --calib
    texts = [result.card.text]
    texts += [(out / f.path).read_text() for f in result.files if f.path.endswith(".json")]
    return "\n".join(texts)


def test_report_names_the_artifact_files_and_push_accepts_it(validated):
    _, out = validated
    data = json.loads((out / "validation.json").read_text())
    manifest = json.loads((out / "eagle3_quant.json").read_text())
    assert data["artifact"] == "fp8"
    assert data["artifact_files"] == {e["path"]: e["sha256"] for e in manifest["outputs"]}
    assert push_draft(out, "org/draft-fp8", dry_run=True, **NAMES, allow_unmeasured=True).validation_state == "passed"


def test_report_of_another_artifact_is_refused_and_never_shown(validated, tmp_path):
    src, out = validated
    other = quantize_draft(src, tmp_path / "other", device="cpu", exclude=["down_proj"]).output
    shutil.copy(out / "validation.json", other / "validation.json")     # a passing report, but for `fp8`
    for allow in (False, True):
        with pytest.raises(NotValidatedError, match="belongs to another artifact") as info:
            push_draft(other, "org/other", dry_run=True, **NAMES, allow_unvalidated=allow)
        assert "fp8" in str(info.value) and "model.safetensors" in str(info.value)
    card = make_card(other, "org/other", write=False, **NAMES)
    assert card.validation.state == "foreign" and "**Not validated**" in card.text
    assert "passed; the full report" not in card.text


def test_requantized_artifact_needs_validating_again(validated):
    src, out = validated
    quantize_draft(src, out, device="cpu", exclude=["down_proj"], force=True)
    assert not (out / "validation.json").exists()      # the whole folder was replaced
    validate_draft(out, kernel=False)
    assert push_draft(out, "org/draft-fp8", dry_run=True, **NAMES, allow_unmeasured=True).validation_state == "passed"


def test_published_files_name_a_local_source_by_its_folder_only(validated, tmp_path):
    src, out = validated
    text = published_text(out)
    assert str(tmp_path) not in text and "/home/alice" not in text
    manifest = json.loads((out / "eagle3_quant.json").read_text())
    assert manifest["source"]["path"] == "my-draft" and manifest["inputs"]
    # the absolute path stays local, for validate's default reference, and is never hashed nor sent
    assert json.loads((out / LOCAL_RECORD).read_text())["source_path"] == str(src.resolve())
    pushed = push_draft(out, "org/x", dry_run=True, **NAMES, allow_unmeasured=True)
    assert LOCAL_RECORD not in {f.path for f in pushed.files}
    assert validate_draft(out, kernel=False).reference == src.resolve()


def test_public_name():
    assert public_name("/home/alice/drafts/my-draft") == "my-draft"
    assert public_name("./cal") == "cal"
    assert public_name("meta-llama/Llama-3.1-8B-Instruct") == "meta-llama/Llama-3.1-8B-Instruct"
    assert public_name(None) is None


# --- values and parsers --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.9", True])
def test_gates_must_be_finite_numbers(value):
    with pytest.raises(OptionsError, match="min_top1_agreement"):
        Gates(min_top1_agreement=value)
    with pytest.raises(OptionsError, match="is not a finite number"):
        Gates.from_value({"min_top1_agreement": value})


def test_nan_gate_on_the_cli_is_bad_input_not_a_failed_gate(validated, capsys):
    from eagle3_quant.cli import main

    _, out = validated
    before = (out / "validation.json").read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(out), "--min-top1", "nan", "--no-kernel"])
    assert exit_info.value.code == 2
    assert "'--min-top1': nan is not a finite number" in capsys.readouterr().err    # refused at the option
    assert (out / "validation.json").read_bytes() == before


def test_strict_json_names_the_non_finite_field():
    with pytest.raises(CheckpointFileError, match=r"field 'a\.b\[1\]'.*Infinity is not a JSON number"):
        loads_strict('{"a": {"b": [1, Infinity]}}', "x.json", CheckpointFileError)
    assert loads_strict('{"a": [1.5, "NaN"]}', "x.json") == {"a": [1.5, "NaN"]}   # a string is fine


def test_header_length_between_the_library_limit_and_the_file_size_is_one_error(tmp_path):
    path = tmp_path / "big.safetensors"
    with path.open("wb") as fh:          # sparse: 8 bytes of length, then a hole
        fh.write(struct.pack("<Q", MAX_HEADER_BYTES + 8))
        fh.truncate(MAX_HEADER_BYTES + 64)
    with pytest.raises(CheckpointFileError, match="header length"):
        read_header(path)


def test_yaml_alias_bomb_is_refused_at_once():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
    started = time.perf_counter()
    with pytest.raises(PipelineSpecError, match="anchors and aliases"):
        load_yaml_text(bomb, "p.yaml", PipelineSpecError)
    assert time.perf_counter() - started < 1.0
    with pytest.raises(PipelineSpecError, match="nested deeper than 64"):
        load_yaml_text("[" * 200 + "]" * 200, "p.yaml", PipelineSpecError)
    with pytest.raises(PipelineSpecError, match="larger than"):
        load_yaml_text("a: " + "x" * (2 << 20), "p.yaml", PipelineSpecError)


@pytest.mark.parametrize("text,ok", [("org/name", True), ("meta-llama/Llama-3.1-8B", True), ("org/a--b", False),
                                     ("org/a..b", False), ("name", False), ("org/" + "x" * 100, False),
                                     ("../x/y", False)])
def test_repo_ids_are_validated_as_huggingface_hub_does(text, ok):
    assert is_repo_id(text) is ok


def test_invalid_repo_id_is_refused_before_any_request(monkeypatch):
    import huggingface_hub

    from eagle3_quant.errors import SourceNotFoundError
    from eagle3_quant.reading.source import resolve_source

    def refuse(*args, **kwargs):
        raise AssertionError("a Hub request was made")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    with pytest.raises(SourceNotFoundError, match="not a valid Hub repo id"):
        resolve_source("org/a--b")


def test_every_json_writer_is_strict():
    """No json.dumps / json.dump in shipped code writes NaN or Infinity (allow_nan=False everywhere)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    loose = []
    for folder in ("eagle3_quant", "calib", "quantize", "validate", "export"):
        for path in (root / folder).rglob("*.py"):
            if path.name.startswith("synthetic"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("dumps", "dump") and \
                        getattr(node.func.value, "id", "") == "json" and \
                        not any(k.arg == "allow_nan" for k in node.keywords):
                    loose.append(f"{path.relative_to(root)}:{node.lineno}")
    assert loose == [], loose
