"""Nothing private is published: the recorded quantize command keeps the verb, the flags and the public names of its
inputs (records/public_names.py `public_command`), and no published file (card, manifest, validation.json,
bench.json) holds the machine's home, working folder or temporary paths."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from calib_fixtures import write_target

from eagle3_quant.cli import main
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.records.public_names import public_argv, public_command
from eagle3_quant.records.validation_report import REPORT_NAME
from fixtures.synthetic import write_synthetic_draft

PUBLISHED = (MANIFEST_NAME, REPORT_NAME, "README.md", "bench.json")
CASES = [
    QuantizeOptions(),
    QuantizeOptions(scheme="fp8", calib=Path("/home/alice/sets/cal-1"), exclude=("down_proj", "o_proj"),
                    device="cpu", force=True, engine="vllm", auto_exclude=0.25),
    QuantizeOptions(scheme="auto", calib=Path("./cal"), min_acceptance_ratio=0.98, engine="both", verbose=True),
    QuantizeOptions(quantize_fc=True, gptq=True, calib=Path("~/cal"), revision="v1", draft_vocab=128),
]


def _parsed_by_the_cli(argv: list[str], monkeypatch) -> tuple[str, str, QuantizeOptions]:
    import eagle3_quant.quantize.api as api

    seen = {}
    monkeypatch.setattr(api, "quantize_draft", lambda src, out, options, **_: seen.update(call=(src, out, options)) or
                        (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        main(argv[1:])
    src, out, options = seen["call"]
    return src, str(out), options


@pytest.mark.parametrize("options", CASES, ids=range(len(CASES)))
def test_the_recorded_command_parses_back_to_the_same_options(options, monkeypatch):
    argv = public_command("quantize", ("/home/alice/drafts/my-draft", Path("/tmp/x/my-draft-fp8")), options)
    assert argv[:4] == ["eagle3-quant", "quantize", "my-draft", "my-draft-fp8"]
    assert not any(a.startswith(("/", "~", "./")) for a in argv), argv
    src, out, parsed = _parsed_by_the_cli(argv, monkeypatch)
    public = dataclasses.replace(options, calib=Path(options.calib.name) if options.calib else None)
    assert (src, out, parsed) == ("my-draft", "my-draft-fp8", public)


def test_a_hub_source_and_default_options_are_kept_as_typed():
    assert public_command("quantize", ("org/draft", "out"), QuantizeOptions()) == [
        "eagle3-quant", "quantize", "org/draft", "out"]
    assert public_argv(["eagle3-quant", "quantize", "/home/alice/d", "--calib", "/data/cal", "--exclude", "o_proj"]) \
        == ["eagle3-quant", "quantize", "d", "--calib", "cal", "--exclude", "o_proj"]


def _calibration(folder: Path, target: Path, taps: tuple[int, ...]) -> Path:
    """A tiny set holding `taps`: random states, the target's 'greedy' continuation from position 8."""
    gen = torch.Generator().manual_seed(0)
    writer = CalibrationWriter(folder, CalibrationInfo(str(target), taps, 64, "bfloat16", "tests"))
    for _ in range(3):
        ids = torch.randint(0, 512, (24,), generator=gen)
        writer.add(CalibrationSample(ids, torch.randn(24, 64 * len(taps), generator=gen).to(torch.bfloat16),
                                     torch.roll(ids, -1), 8))
    writer.close()
    return folder


def _private_paths(tmp_path: Path) -> set[str]:
    return {str(tmp_path), str(tmp_path.resolve()), os.getcwd(), str(Path.home()), str(Path(__file__).parent)}


@pytest.mark.slow
def test_no_published_file_holds_a_local_path(tmp_path, capsys):
    """quantize (static FP8, --auto-exclude: the calibration, sensitivity and plan records), validate and card, all
    with absolute paths under tmp_path; then every published file is searched for the home, working and tmp paths."""
    home = tmp_path / "home" / "alice"
    src = write_synthetic_draft(home / "drafts" / "my-draft", "tiny", aux_layer_ids=[2, 4, 5])
    target = write_target(home / "models" / "my-target")
    cal = _calibration(home / "sets" / "my-cal", target, (2, 3, 4, 5, 6))   # vLLM's [2, 4, 5] and the trained [3, 5, 6]
    out = home / "out" / "my-draft-fp8"
    for argv in (["quantize", str(src), str(out), "--scheme", "fp8", "--calib", str(cal), "--auto-exclude", "0.5",
                  "--device", "cpu"],
                 ["validate", str(out), "--reference", str(src), "--calib", str(cal), "--no-kernel"],
                 ["card", str(out), "--repo-id", "alice/my-draft-fp8", "--target", "org/my-target", "--base-model",
                  "alice/my-draft"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code in (0, 1, None), capsys.readouterr().err   # 1: a gate of the random draft
    manifest = Manifest.read(out)
    assert manifest.command == ["eagle3-quant", "quantize", "my-draft", "my-draft-fp8", "--scheme", "fp8",
                                "--device", "cpu", "--calib", "my-cal", "--auto-exclude", "0.5"]
    card = (out / "README.md").read_text()
    assert "Recorded quantize command: `eagle3-quant quantize my-draft my-draft-fp8 --scheme fp8" in card
    published = [out / name for name in PUBLISHED if (out / name).is_file()]
    assert {p.name for p in published} >= {MANIFEST_NAME, REPORT_NAME, "README.md"}
    json.loads((out / REPORT_NAME).read_text())
    # the other records that name a calibration set: vocabulary pruning, smoothing, GPTQ
    for name, flags in (("pruned", ["--draft-vocab", "128"]), ("smoothed", ["--smooth-alpha", "0.5"]),
                        ("gptq", ["--gptq"])):
        with pytest.raises(SystemExit) as exit_info:
            main(["quantize", str(src), str(home / "out" / name), "--calib", str(cal), "--device", "cpu", *flags])
        assert exit_info.value.code in (0, None), capsys.readouterr().err
        published.append(home / "out" / name / MANIFEST_NAME)
    assert Manifest.read(home / "out" / "pruned").vocab_pruning["calibration"] == "my-cal"
    assert Manifest.read(home / "out" / "smoothed").smoothing["calibration"] == "my-cal"
    for file in published:
        text = file.read_text()
        for private in _private_paths(tmp_path):
            assert private not in text, (file.name, private)
