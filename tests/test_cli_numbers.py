"""Numbers that cannot be: every numeric option of every verb parses with one bounded type (cli/numbers.py over
eagle3_quant/options.Number), so inf, nan and absurd values are refused at the option, in one `error:` line naming
the option and the value, exit 2, before anything is read or written. The options are taken from the CLI's own
parsers, so an option added later is covered (and `test_every_numeric_option_is_bounded` fails if it is not)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.main import get_command

import eagle3_quant.cli  # noqa: F401  (registers every verb on the app)
from eagle3_quant.cli import main
from eagle3_quant.cli.app import app
from eagle3_quant.cli.help_format import _element
from eagle3_quant.errors import EstimateInputError, OptionsError
from eagle3_quant.options import COUNT, FRACTION, TIME, Number

COMMANDS = get_command(app).commands


def _numeric(param) -> bool:
    descriptor = getattr(param, "type_descriptor", None)
    return param.param_type_name == "option" and _element(getattr(descriptor, "annotation", None)) in (int, float)


NUMERIC = [(verb, param) for verb, command in sorted(COMMANDS.items()) for param in command.params if _numeric(param)]
HOSTILE = ("inf", "-inf", "nan", "1e308", "99999999999999999999", "-5", "ten")


def _bound(param) -> Number:
    return param.type_descriptor.parameter_info.parser.bound


def argv_for(verb: str, option: str, value: str) -> list[str]:
    """The verb with dummy arguments and required options, and `option` set to `value`."""
    argv = [verb]
    for param in COMMANDS[verb].params:
        if param.param_type_name == "argument":
            argv.append("missing-folder")
        elif param.required and param.opts[0] != option:
            argv += [param.opts[0], "1" if _numeric(param) else "x"]
    return [*argv, option, value]


def run(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


def test_the_verbs_have_numeric_options_and_every_one_is_bounded():
    assert len(NUMERIC) >= 30 and {v for v, _ in NUMERIC} >= {"bench", "calibrate", "cost", "estimate", "quantize",
                                                             "sensitivity", "validate"}
    for verb, param in NUMERIC:
        parser = param.type_descriptor.parameter_info.parser
        assert isinstance(getattr(parser, "bound", None), Number), f"{verb} {param.opts[0]} takes an unbounded number"
        bound = _bound(param)
        assert math.isfinite(bound.low) and math.isfinite(bound.high)
        assert (bound.kind is int) == (_element(param.type_descriptor.annotation) is int), (verb, param.opts[0])


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("verb, param", NUMERIC, ids=[f"{v}{p.opts[0]}" for v, p in NUMERIC])
def test_every_numeric_option_refuses_what_cannot_be(verb, param, value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    option = param.opts[0]
    bound = _bound(param)
    if value == "-5" and bound.low < -5:
        value = f"{bound.low * 2:g}"                    # below a range that allows -5 (decibels)
    code, err = run(argv_for(verb, option, value), capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    says = f"{value} is not a finite number" if bound.kind is float and value in ("inf", "-inf", "nan") else \
        f"{bound.text()}" if value != "ten" else f"'ten' is not {bound.text()}"
    assert f"Invalid value for '{option}'" in err and says in err and value.strip("-")[:2] in err, err
    assert list(tmp_path.iterdir()) == []                # nothing read into being, nothing written


@pytest.mark.parametrize("verb, param", NUMERIC, ids=[f"{v}{p.opts[0]}" for v, p in NUMERIC])
def test_the_bounds_admit_the_documented_defaults(verb, param):
    """Each bound admits the option's own default (None: not given), so refusing absurd values refuses no real one."""
    if param.default is not None:
        assert _bound(param).problem(param.default) is None, (verb, param.opts[0], param.default)


@pytest.mark.parametrize("argv, says", [
    (["bench", "o", "--target", "t", "--concurrency", "1,inf"], "'--concurrency': '1,inf': 'inf' is not an integer"),
    (["bench", "o", "--target", "t", "--concurrency", "4,0"], "'--concurrency': '4,0': 0 is not an integer in 1.."),
    (["calibrate", "c", "--draft", "d", "--data", "x", "--target", "t", "--aux-layer-ids", "2,15,1e9"],
     "'--aux-layer-ids': '2,15,1e9': '1e9' is not an integer in 0..100000"),
    (["calibrate", "c", "--draft", "d", "--from-dump", "x", "--dump-layer-ids", "0,-1"],
     "'--dump-layer-ids': '0,-1': -1 is not an integer in 0.."),
])
def test_lists_of_numbers_take_the_same_bounds(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = run(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize("argv, says", [
    (["estimate", "out", "--verify-ms", "inf"], "'--verify-ms': inf is not a finite number"),
    (["estimate", "out", "--verify-ms", "1e308", "--json"], "'--verify-ms': 1e308 is not a number in (0, 1e+07]"),
    (["estimate", "out", "--verify-ms", "2", "--draft-ms", "inf"], "'--draft-ms': inf is not a finite number"),
])
def test_the_estimate_examples(argv, says, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = run(argv, capsys)
    assert (code, err) == (2, f"error: Invalid value for {says} (see: eagle3-quant estimate -h)\n")


def test_the_api_takes_the_same_bounds():
    from eagle3_quant.speedup import ReportAcceptance, estimate_speedup

    acceptance = ReportAcceptance((0.8, 0.6, 0.4), None, 10)
    for verify_ms, draft_ms in ((math.inf, 1.0), (1e308, 1.0), (1.0, math.inf), (1.0, math.nan), (None, 1.0)):
        with pytest.raises(EstimateInputError, match="verify_ms|draft_ms"):
            estimate_speedup(acceptance, verify_ms, draft_ms=draft_ms)
    assert estimate_speedup(acceptance, 2.0, draft_ms=1.0).cycle_ms == 3.0
    from eagle3_quant.quantize.options import QuantizeOptions

    with pytest.raises(OptionsError, match="field 'draft_vocab': 99999999999 is not an integer in 1..2147483647"):
        QuantizeOptions(draft_vocab=99999999999, calib=Path("c"))


def test_number_says_what_is_wrong():
    assert COUNT.parse(" 12 ") == 12 and TIME.parse("2.5") == 2.5 and FRACTION.parse("1") == 1.0
    assert [TIME.problem(v) for v in (0.0, 1e7, 1e7 + 1)] == ["0.0 is not a number in (0, 1e+07]", None,
                                                               "10000001.0 is not a number in (0, 1e+07]"]
    assert COUNT.problem(True) == "True is not an integer in 1..2147483647"        # a bool is no count
    assert COUNT.problem(2.0) == "2.0 is not an integer in 1..2147483647"
    with pytest.raises(ValueError, match="'1.5' is not an integer"):
        COUNT.parse("1.5")


@pytest.mark.parametrize("build, says", [
    (lambda: __import__("eagle3_quant.bench.options", fromlist=["x"]).BenchOptions(timeout_s=math.inf),
     "field 'timeout_s': inf is not a finite number"),
    (lambda: __import__("eagle3_quant.bench.options", fromlist=["x"]).BenchOptions(seed=-1),
     "field 'seed': -1 is not an integer in 0..4294967295"),
    (lambda: __import__("eagle3_quant.calib.options", fromlist=["x"]).CalibrationOptions(num_samples=10**12),
     "field 'num_samples': 1000000000000 is not an integer in 1..2147483647"),
    (lambda: __import__("eagle3_quant.calib.options", fromlist=["x"]).CalibrationOptions(
        backend="vllm", engine_timeout=math.nan), "field 'engine_timeout': nan is not a finite number"),
    (lambda: __import__("eagle3_quant.calib.options", fromlist=["x"]).ImportOptions(dump_layer_ids=(1, math.inf)),
     "field 'dump_layer_ids': inf is not an integer in 0..100000"),
])
def test_the_options_a_pipeline_file_fills_take_the_same_bounds(build, says):
    """`run PIPELINE.yaml` and the Python API build these options without the CLI's parser: the same ranges hold."""
    from eagle3_quant.errors import Eagle3QuantError

    with pytest.raises(Eagle3QuantError) as info:
        build()
    assert str(info.value) == says
