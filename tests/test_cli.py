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


def _verbs():
    from eagle3_quant.cli.help_format import PANELS

    return [name for verbs in PANELS.values() for name in verbs]


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    code, out, _ = run_cli("--version", capsys=capsys)
    assert code == 0 and out.strip() == f"eagle3-quant {version('eagle3-quant')}"


def test_help_lists_every_verb_once_under_its_panel_with_its_whole_summary(capsys):
    from eagle3_quant.cli.app import app
    from eagle3_quant.cli.help_format import PANELS

    code, out, _ = run_cli("-h", capsys=capsys)
    assert code == 0
    registered = sorted(c.name for c in app.registered_commands)
    assert sorted(_verbs()) == registered                       # a new verb must be given a panel
    headers = [line[:-1] for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert headers == ["Options", *(p.capitalize() for p in PANELS)]
    for verbs in PANELS.values():
        for name, summary in verbs.items():
            assert [line.split() for line in out.splitlines() if line.startswith(f"  {name} ")] == \
                   [[name, *summary.split()]]                   # on one line, not cut


@pytest.mark.parametrize("verb", ["inspect", "calibrate", "quantize", "validate", "bench", "card", "push", "run",
                                  "sensitivity", "cost", "estimate"])
def test_every_verb_takes_h_and_shows_words_not_python_types(verb, capsys):
    code, out, _ = run_cli(verb, "-h", capsys=capsys)
    assert code == 0 and out.startswith(f"Usage: eagle3-quant {verb} [OPTIONS]")
    usage = out.splitlines()[0]
    assert "{" not in usage and "<" not in usage
    assert not any(t in out for t in ("<str>", "<int>", "<float>", "<path>", "<bool>", "list[", "{src}", "{out}"))


def _option_line(verb: str, option: str, capsys) -> str:
    _, out, _ = run_cli(verb, "-h", capsys=capsys)
    text = " ".join(out.split())
    start = text.index(f" {option} ")
    return text[start:text.index(" --", start + len(option) + 2)]


def test_scheme_choices_are_shown_and_only_what_the_verb_accepts(capsys):
    assert "ptpc_fp8|fp8|" in _option_line("inspect", "--scheme", capsys)
    assert "|auto" in _option_line("quantize", "--scheme", capsys)
    line = _option_line("sensitivity", "--scheme", capsys)
    assert "ptpc_fp8|fp8|" in line and "auto" not in line
    code, _, err = run_cli("sensitivity", "d", "--calib", "c", "--scheme", "auto", capsys=capsys)
    assert code == 2 and "auto" in err


def test_required_options_are_marked(capsys):
    assert "[required]" in _option_line("bench", "--target", capsys)
    assert "[required]" in _option_line("push", "--repo-id", capsys)
    assert "[required]" in _option_line("calibrate", "--draft", capsys)
    code, _, err = run_cli("bench", "out", capsys=capsys)
    assert code == 2 and "--target" in err


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom eagle3_quant.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch', 'quark.torch', 'transformers', 'datasets', 'huggingface_hub') "
            "if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Prepare:" in result.stdout and result.stdout.strip().endswith("[]")
