"""Every scheme's card and validate report name that scheme's precision and no other's: the words come from the
registry (`schemes.precision_label`), never from a literal "FP8"."""

from __future__ import annotations

import re

import pytest

from eagle3_quant import quantize_draft
from eagle3_quant.cli.render import console
from eagle3_quant.cli.render_validate import print_validation
from eagle3_quant.export.card import build_card
from eagle3_quant.schemes import SCHEMES, precision_label, precision_words
from eagle3_quant.validate.api import validate_draft

pytestmark = pytest.mark.slow
LABELS = ("FP8", "INT8", "INT4", "NVFP4", "MXFP4", "MXFP6", "MXFP8")
NEEDS = {"w4a16_int4": {"rtn": True}}          # AWQ needs more samples than the tiny set; RTN writes the same format


@pytest.fixture(scope="module")
def runs(tiny_pair, union_calib, tmp_path_factory):
    """({scheme: (card text, validate's printed report, the report)}, the source) on the tiny pair's draft."""
    root = tmp_path_factory.mktemp("labels")
    src = tiny_pair.draft
    found = {}
    for name in SCHEMES:
        calib = union_calib if SCHEMES[name].needs_data(bool(NEEDS.get(name))) else None
        out = quantize_draft(src, root / name, scheme=name, calib=calib, device="cpu", **NEEDS.get(name, {})).output
        report = validate_draft(out, reference=src, calib=union_calib, kernel=False, vllm=False, sglang=False)
        with console.capture() as printed:
            print_validation(report)
        card = build_card(out, "org/draft", target="org/target", base_model="org/source").text
        found[name] = card, printed.get(), report
    return found, src


def _labels_in(text: str) -> set[str]:
    return {label for label in LABELS if re.search(rf"\b{label}\b", text)}


def _lines_naming(text: str, labels: set[str]) -> list[str]:
    return [line for line in text.splitlines() if _labels_in(line) & labels]


@pytest.mark.parametrize("name", list(SCHEMES))
def test_card_and_report_name_the_schemes_precision_and_no_other(runs, name):
    card, printed, report = runs[0][name]
    allowed = _labels_in(precision_words(name))
    assert precision_label(name) in allowed
    assert f"({name})" in card.splitlines()[0] or f"`{name}`" in card
    assert f"quantized to {precision_label(name)} |" in card
    assert f"acceptance length, {precision_label(name)} draft" in card
    assert _labels_in(card) <= allowed, _lines_naming(card, _labels_in(card) - allowed)
    assert report.label.startswith(precision_label(name))
    assert f"KL(BF16 || {report.label})" in printed
    assert _labels_in(printed) <= allowed, _lines_naming(printed, _labels_in(printed) - allowed)


def test_tags_name_the_precision_not_fp8_for_every_scheme(runs):
    from huggingface_hub import ModelCard

    for name, (card, _, _) in runs[0].items():
        tags = ModelCard(card).data.tags
        assert precision_label(name).lower() in tags and name in tags
        assert "fp8" not in tags or "FP8" in precision_words(name).split(), (name, tags)


def test_a_missed_gate_names_the_rung_auto_would_measure_next(runs):
    from eagle3_quant.quantize.next_rung import next_rung
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.records.artifact import open_artifact

    found, src = runs
    for name, (_, _, report) in found.items():
        for check in report.checks:
            if check.name in ("top1_agreement", "acceptance_ratio") and check.status == "failed":
                assert "; try --scheme " in check.detail, (name, check.detail)
    hint = next_rung(open_artifact(found["nvfp4"][2].artifact).manifest, read_draft(src))
    heavier, ratio = hint.split(" (")[0].split()[1], float(hint.split(": ")[1].split("x")[0])
    assert heavier in SCHEMES and heavier != "nvfp4" and ratio > 1.0


def test_a_config_claiming_another_scheme_fails_a_check_without_a_traceback(runs, tmp_path):
    """PTPC FP8 tensors under nvfp4's quantization_config (the manifest's hashes made to agree): a failed check."""
    import hashlib
    import json
    import shutil

    found, src = runs
    out = tmp_path / "mislabelled"
    shutil.copytree(found["ptpc_fp8"][2].artifact, out, ignore=shutil.ignore_patterns("validation.json"))
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = json.loads((found["nvfp4"][2].artifact / "config.json").read_text())[
        "quantization_config"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    manifest = json.loads((out / "eagle3_quant.json").read_text())
    for entry in manifest["outputs"]:
        if entry["path"] == "config.json":
            data = (out / "config.json").read_bytes()
            entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (out / "eagle3_quant.json").write_text(json.dumps(manifest))
    report = validate_draft(out, reference=src, kernel=False, vllm=False, sglang=False)
    assert not report.passed and report.failed_checks


def test_quantize_warns_exactly_when_validate_fails_the_weight_sqnr_gate(runs):
    from eagle3_quant.quantize.api import sqnr_warning
    from eagle3_quant.records.artifact import open_artifact

    for name, (_, _, report) in runs[0].items():
        status = next(c.status for c in report.checks if c.name == "weight_sqnr")
        warning = sqnr_warning(report.artifact, open_artifact(report.artifact).manifest)
        assert (warning is not None) == (status == "failed"), (name, status, warning)
        assert warning is None or "validate will fail it" in warning
