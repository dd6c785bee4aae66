"""What is printed is data, not structure: a name holding a newline, a carriage return, an escape sequence or a
bidirectional override prints escaped, in the one error line and in every table and line the CLI's console draws,
so no value (a file name in an artifact, a field of a record) can forge a line of the tool's output."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from rich.table import Table

from eagle3_quant.cli import main
from eagle3_quant.cli.data_console import DataConsole
from eagle3_quant.errors import PublishError, one_line
from eagle3_quant.records.manifest import Manifest

FORGED = "x\nerror: forged\r\x1b[2K\u2028\u202eevil"


def test_one_line_writes_every_control_character_as_its_escape():
    assert one_line(FORGED) == "x\\nerror: forged\\r\\x1b[2K\\u2028\\u202eevil"
    assert one_line("draft-fp8 é ü 中 \t") == "draft-fp8 é ü 中 \\t"      # text stays, a tab is shown
    assert str(PublishError("refused", path=f"out/{FORGED}", field="outputs")).count("\n") == 0


def test_the_console_prints_a_value_inside_its_line_and_its_cell():
    buffer = io.StringIO()
    console = DataConsole(file=buffer, highlight=False, width=200)
    table = Table(title=f"files of {FORGED}")
    table.add_column("file")
    table.add_row(FORGED)
    console.print(table)
    console.print(f"wrote {FORGED}", markup=False)
    lines = buffer.getvalue().splitlines()
    assert not [line for line in lines if line.lstrip("│ ").startswith("error:")], lines
    assert sum("\\x1b[2K\\u2028\\u202eevil" in line for line in lines) == 3 and len(lines) == 8   # title, cell, line


def test_a_file_name_cannot_forge_a_line_of_push_or_card(quantized_tiny, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(quantized_tiny()[1], out, ignore=shutil.ignore_patterns(".*"))
    (out / "x\nerror: forged").write_text("a file quantize did not write")
    for argv in (["push", str(out), "--repo-id", "org/x", "--dry-run", "--allow-unvalidated", "--allow-unmeasured"],
                 ["card", str(out), "--repo-id", "org/x", "--target", "org/t", "--base-model", "org/d"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
        assert "files not in the manifest: 'x\\nerror: forged'" in err
    assert not (out / "README.md").exists()


def test_a_manifest_listing_a_name_with_a_control_character_is_refused(quantized_tiny, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(quantized_tiny()[1], out)
    data = json.loads((out / "eagle3_quant.json").read_text())
    data["outputs"].append({"path": "a\rb", "size": 1, "sha256": "0" * 64})
    (out / "eagle3_quant.json").write_text(json.dumps(data))
    with pytest.raises(PublishError) as info:
        Manifest.read(out, PublishError)
    assert info.value.field == "outputs.path" and "'a\\rb' is not a path inside the output folder" in str(info.value)

