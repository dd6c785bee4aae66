"""Every case of the bad-input corpus (tests/corpus/cases.py) through the API and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from corpus.builders import tree_state
from corpus.cases import CASES, BadCase

from eagle3_quant.cli import main
from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.util import resources


def prepare(case: BadCase, tmp_path, monkeypatch):
    src = case.build(tmp_path)
    out = case.out(tmp_path, src)
    for name, stand_in in case.probes.items():
        monkeypatch.setattr(resources, name, stand_in)
    return src, out, tree_state(tmp_path)


def assert_clear_line(message: str, case: BadCase) -> None:
    assert "\n" not in message.strip(), message
    assert "Traceback" not in message
    for part in case.says:
        assert part in message, (part, message)


def test_corpus_is_large_and_covers_every_error_kind():
    assert len(CASES) >= 30
    assert len({c.error for c in CASES}) >= 8


def test_docs_guarantees_state_the_corpus():
    section = (Path(__file__).resolve().parent.parent / "docs" / "guarantees.md").read_text()
    assert f"{len(CASES)} cases built in code" in section
    assert "1.1920929e-07" in section and "--allow-pickle" in section


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_api_raises_typed_error_and_leaves_nothing(case, tmp_path, monkeypatch):
    src, out, before = prepare(case, tmp_path, monkeypatch)
    with pytest.raises(Eagle3QuantError) as info:
        quantize_draft(src, out, device="cpu", **case.api_kwargs(src))
    error = info.value
    assert type(error) is case.error, repr(error)
    assert error.path or error.tensor or error.field, "the error names no file, tensor or field"
    assert_clear_line(str(error), case)
    assert tree_state(tmp_path) == before   # source unchanged, no OUT, no hidden partial folder


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_exits_2_with_one_line_and_leaves_nothing(case, tmp_path, monkeypatch, capsys):
    src, out, before = prepare(case, tmp_path, monkeypatch)
    monkeypatch.delenv("EAGLE3_QUANT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(case.cli_args(src, out))
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    assert captured.err.startswith("error: ") and captured.err.endswith("\n")
    assert_clear_line(captured.err, case)
    assert tree_state(tmp_path) == before


SUBPROCESS_CASES = ("truncated-safetensors", "config-hidden-size-is-a-string", "nan-in-a-weight",
                    "pickle-that-runs-code-with-allow-pickle")


@pytest.mark.parametrize("case", [c for c in CASES if c.id in SUBPROCESS_CASES], ids=lambda c: c.id)
def test_real_entry_point_prints_no_traceback(case, tmp_path):
    src = case.build(tmp_path)
    out = case.out(tmp_path, src)
    before = tree_state(tmp_path)
    run = subprocess.run([sys.executable, "-c", "from eagle3_quant.cli import main; main()",
                          *case.cli_args(src, out)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: "), run.stderr
    assert_clear_line(run.stderr, case)
    assert tree_state(tmp_path) == before
    assert not (tmp_path / "pwned").exists()
