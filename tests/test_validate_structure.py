"""`validate` on Quark-made synthetic drafts: data-free checks, broken artifacts, report schema, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from validate_helpers import copy_artifact, noise_in_weight, plain_quark_exclude, rewrite_tensor, scale_times_8

from eagle3_quant.cli import main
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.report import REPORT_VERSION
from eagle3_quant.validate.vllm_load import vllm_missing_reason

pytestmark = pytest.mark.slow
Q_PROJ = "midlayer.self_attn.q_proj"
VLLM = {"vllm_load"} if vllm_missing_reason() is None else set()   # vLLM's own code judges too
DATA_FREE = ("fp8_weights", "finite", "unchanged_parts", "config_consistency", "loader_compat", "manifest",
             "weight_sqnr", "kernel_numerics")


@pytest.fixture
def artifact(quantized_tiny, tmp_path):
    src, out = quantized_tiny()
    return src, copy_artifact(out, tmp_path / "out")


def statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_clean_artifact_passes_data_free_checks_and_says_what_did_not_run(artifact):
    src, out = artifact
    report = validate_draft(out, reference=src)
    status = statuses(report)
    assert report.passed, report.failed_checks
    assert all(status[name] == "passed" for name in DATA_FREE), status
    for name in ("top1_agreement", "acceptance_ratio", "kernel_path", "mi355x_hipblaslt"):
        assert status[name] == "skipped" and report.check(name).detail
    assert "--calib" in report.check("acceptance_ratio").detail
    assert 28 < report.metrics.min_weight_sqnr_db < 40      # FP8 E4M3 per-channel on Gaussian weights
    assert len(report.layers) == 7
    data = json.loads((out / "validation.json").read_text())
    assert data["report_version"] == REPORT_VERSION and data["passed"] is True
    assert data["kernel"]["status"] == "skipped" and "GPU" in data["kernel"]["reason"]
    assert all(row["bit_exact"] for row in data["kernel"]["numerics"])          # CPU scaled_mm == dequant
    assert "acceptance_length_fp8" not in data["metrics"]                        # not measured: absent
    assert {c["status"] for c in data["checks"]} <= {"passed", "failed", "skipped"}


def test_reference_defaults_to_the_manifest_source(artifact):
    src, out = artifact
    report = validate_draft(out, kernel=False)
    assert report.reference == src.resolve() and report.check("unchanged_parts").status == "passed"


@pytest.mark.parametrize(("breakage", "failing"), [
    (lambda out: scale_times_8(out, Q_PROJ), {"weight_sqnr", "manifest"}),
    (lambda out: noise_in_weight(out, Q_PROJ), {"weight_sqnr", "manifest"}),
    (plain_quark_exclude, {"loader_compat", "manifest", *VLLM}),   # vLLM itself: fc FP8, NaN logits
    (lambda out: rewrite_tensor(out, Q_PROJ + ".weight",
                                lambda w: w.view(torch.uint8).index_fill(1, torch.tensor([3]), 0x7F)
                                .view(torch.float8_e4m3fn)), {"finite", "weight_sqnr", "manifest", *VLLM}),
    (lambda out: rewrite_tensor(out, "midlayer.input_layernorm.weight", lambda w: w * 1.01),
     {"unchanged_parts", "manifest"}),
    (lambda out: rewrite_tensor(out, Q_PROJ + ".weight_scale", lambda s: s.index_fill(0, torch.tensor([0]), 0.0)),
     {"fp8_weights", "weight_sqnr", "manifest"}),
], ids=["scale_x8", "noise", "plain_exclude", "fp8_nan", "norm_changed", "zero_scale"])
def test_broken_artifacts_fail_the_right_checks(artifact, breakage, failing):
    src, out = artifact
    breakage(out)
    report = validate_draft(out, reference=src, kernel=False, sglang=False)   # SGLang's view: test_sglang_load.py
    assert not report.passed
    assert {c.name for c in report.failed_checks} == failing


def test_cli_exit_codes_and_json(artifact, tmp_path, capsys):
    src, out = artifact
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(out), "--reference", str(src), "--report", str(tmp_path / "r.json"), "--json"])
    assert exit_info.value.code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["passed"] is True and json.loads((tmp_path / "r.json").read_text())["checks"] == printed["checks"]
    assert not (out / "validation.json").exists()
    plain_quark_exclude(out)
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(out), "--reference", str(src), "--no-kernel", "--no-sglang"])
    captured = capsys.readouterr().out
    assert exit_info.value.code == 1
    assert "loader_compat" in captured and "FAILED" in captured and (out / "validation.json").is_file()


def test_bad_input_is_one_error_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_calibration_of_another_draft_is_refused(artifact, tmp_path):
    from eagle3_quant.errors import DraftFormatError
    from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

    src, out = artifact
    writer = CalibrationWriter(tmp_path / "cal", CalibrationInfo("t", (1, 2, 3), 64))   # the draft reads 3, 5, 6
    writer.add(CalibrationSample(torch.arange(8), torch.zeros(8, 192), torch.arange(1, 9), 4))
    writer.close()
    with pytest.raises(DraftFormatError, match="hidden_states"):
        validate_draft(out, reference=src, calib=tmp_path / "cal", kernel=False)
    assert not (out / "validation.json").exists()
