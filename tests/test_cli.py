from __future__ import annotations

import json
import subprocess
import sys

import pytest

from eagle3_quant.cli import main


def run_cli(*args, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_import_and_help_stay_light():
    code = ("import sys, eagle3_quant, eagle3_quant.cli, eagle3_quant.inspection;"
            "heavy = [m for m in ('torch', 'quark.torch', 'transformers', 'datasets') if m in sys.modules];"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_inspect_json(make_draft, capsys):
    code, out, _ = run_cli("inspect", str(make_draft()), "--json", capsys=capsys)
    assert code == 0
    report = json.loads(out)
    assert report["format"] == "specforge" and report["draft_vocab"] == 256
    assert [r["quantize"] for r in report["linears"]].count(True) == 7


def test_bad_source_one_line_error_and_exit_code(tmp_path, capsys):
    code, out, err = run_cli("inspect", str(tmp_path / "nope"), capsys=capsys)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert err.startswith("error: ") and "nope" in err and "Traceback" not in err


def test_unknown_scheme_lists_valid_choices(make_draft, tmp_path, capsys):
    code, _, err = run_cli("quantize", str(make_draft()), str(tmp_path / "o"), "--scheme", "int4", capsys=capsys)
    assert code == 2 and "ptpc_fp8" in err and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_quantize_cli_prints_loader_check(make_draft, tmp_path, capsys):
    code, out, _ = run_cli("quantize", str(make_draft()), str(tmp_path / "o"), "--device", "cpu", capsys=capsys)
    assert code == 0
    assert "model.layers.61.self_attn.qkv_proj" in out and "QuarkW8A8Fp8" in out
    code, _, err = run_cli("quantize", str(make_draft(name="b")), str(tmp_path / "o"), capsys=capsys)
    assert code == 2 and "already exists" in err and "--force" in err
