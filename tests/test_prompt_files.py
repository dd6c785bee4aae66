"""A local prompts file (`bench --prompts`, `calibrate --data`) is read line by line before any engine or tokenizer
work: a malformed line is named with its number, an empty file or one that is not UTF-8 is refused, and a line past
the stated limit is refused while streaming, never read whole."""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path

import pytest
from tiny_pair_fixtures import PAIR

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.bench.prompts import load_prompts
from eagle3_quant.calib.dataset import MAX_ROW_BYTES, check_json_rows, load_rows
from eagle3_quant.calib.target import TargetSpec
from eagle3_quant.cli import main
from eagle3_quant.errors import CalibrationDataError

TARGET = TargetSpec(str(PAIR / "target"), 4, 128, 1024, "float32", "LlamaForCausalLM")
ROW = json.dumps({"text": "def main():\n    return 0\n" * 4})


def rows(n: int) -> str:
    return "".join(ROW + "\n" for _ in range(n))


@pytest.mark.parametrize(("name", "content", "message"), [
    ("bad.jsonl", (rows(2) + '{"text": "unterminated\n' + rows(1)).encode(), "line 3 is not one JSON value"),
    ("bad.json", (rows(3) + "not json at all\n").encode(), "line 4 is not one JSON value"),
    ("empty.jsonl", b"", "is empty: no row to read prompts from"),
    ("blank.jsonl", b"\n  \n\n", "is empty: no row to read prompts from"),
    ("latin1.jsonl", (rows(1) + '{"text": "caf\xe9"}\n').encode("latin-1"), "line 2 is not UTF-8 text"),
])
def test_a_bad_prompts_file_is_one_line_naming_it(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CalibrationDataError) as info:
        load_prompts(BenchOptions(prompts=str(path), num_prompts=2, prompt_len=16, max_tokens=8), TARGET)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_good_files_pass_the_check(tmp_path):
    lines = tmp_path / "ok.jsonl"
    lines.write_text("\ufeff" + rows(3) + "\n")
    assert check_json_rows(lines) == 3
    document = tmp_path / "ok.json"            # a pretty-printed JSON document is not JSON lines
    document.write_text(json.dumps([{"text": "a b c"}, {"text": "d e f"}], indent=2))
    assert check_json_rows(document) == 1 and len(load_rows(str(document))) == 2


def test_a_line_past_the_limit_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as fh:
        fh.write(ROW + "\n" + '{"text": "' + "x" * (5 * MAX_ROW_BYTES) + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(CalibrationDataError, match=r"line 2 is longer than 4 MiB, the limit of one row"):
            check_json_rows(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_ROW_BYTES + (1 << 20), peak          # one row's worth at most, not the 20 MiB line


def test_bench_refuses_a_malformed_prompts_file_before_the_engine(tiny_pair, tmp_path, capsys):
    import shutil

    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path / "art"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(rows(2) + "{oops\n")
    marker = tmp_path / "engine-started"
    engine = tmp_path / "never-python"
    engine.write_text(f'#!/bin/sh\necho started >> "{marker}"\nexec {sys.executable} "$@"\n')
    engine.chmod(0o755)
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", str(artifact), "--target", str(PAIR / "target"), "--reference", str(PAIR / "draft"),
              "--prompts", str(prompts), "--num-prompts", "2", "--max-tokens", "4", "--no-predict",
              "--engine-python", str(engine)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2 and lines == [f"error: {prompts}: line 3 is not one JSON value (JSON lines: "
                                                   "one object per line)"], err
    assert not marker.exists() and not (artifact / "bench.json").exists()
