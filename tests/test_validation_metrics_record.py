"""`validation.json`'s metrics go through one typed record (`records/validation_report.py`): every field checked
when read, an error naming the file and the dotted field; a report reads and writes back byte for byte; and no
module of the package outside `records/` reads the metrics by their keys."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from test_layers import modules

from eagle3_quant.errors import ValidationRecordError
from eagle3_quant.records.validation_report import ValidationMetrics, read_validation, write_report

# the metrics' own keys (top1_agreement and min_weight_sqnr_db also name gates and loader-check results: not scanned)
METRIC_KEYS = frozenset({
    "acceptance_length_bf16", "acceptance_length_fp8", "per_position_acceptance_bf16", "per_position_acceptance_fp8",
    "acceptance_ratio", "acceptance_ratio_interval", "acceptance_ratio_confidence", "acceptance_ratio_method",
    "engine_walk", "drafts_bf16", "drafts_fp8", "aux_layer_ids", "per_position_fp8"})


@pytest.fixture(scope="module")
def report(tiny_pair, tmp_path_factory) -> Path:
    from eagle3_quant.validate.api import validate_draft

    artifact = Path(shutil.copytree(tiny_pair.fp8, tmp_path_factory.mktemp("report") / "art"))
    validate_draft(artifact, reference=tiny_pair.draft, calib=tiny_pair.calib, max_samples=3, kernel=False,
                   vllm=False, sglang=False)
    return artifact / "validation.json"


def test_a_report_reads_into_typed_fields_and_writes_back_byte_for_byte(report, tmp_path):
    text = report.read_text()
    data = json.loads(text)
    metrics = ValidationMetrics.read(data["metrics"], report)
    assert metrics.acceptance_length_fp8 == data["metrics"]["acceptance_length_fp8"]
    assert metrics.engine_walk is not None and metrics.engine_walk.drafts_bf16 > 0
    assert metrics.taps is not None and metrics.taps.measured and metrics.taps.best in {r.name for r in
                                                                                         metrics.taps.measured}
    assert metrics.prediction.engine == "vllm" and metrics.prediction_text.startswith("vllm's numerics in")
    again = tmp_path / "validation.json"
    write_report(again, {**data, "metrics": metrics.to_dict()})
    assert again.read_text() == text
    assert read_validation(report.parent).metrics == metrics


@pytest.mark.parametrize(("change", "field"), [
    (lambda m: m.update(acceptance_ratio="high"), "metrics.acceptance_ratio"),
    (lambda m: m["engine_walk"].update(drafts_bf16=1.5), "metrics.engine_walk.drafts_bf16"),
    (lambda m: m["taps"]["measured"][0].pop("name"), "metrics.taps.measured.0.name"),
    (lambda m: m.update(per_position_acceptance_fp8=["a"]), "metrics.per_position_acceptance_fp8"),
    (lambda m: m.update(prediction=[]), "metrics.prediction"),
])
def test_a_wrong_field_is_named_with_the_file(report, change, field):
    data = json.loads(report.read_text())["metrics"]
    change(data)
    with pytest.raises(ValidationRecordError) as caught:
        ValidationMetrics.read(data, report)
    assert caught.value.field == field and caught.value.path == str(report)


def test_a_report_with_malformed_metrics_reads_as_unreadable(report, tmp_path):
    data = json.loads(report.read_text())
    data["metrics"]["engine_walk"]["acceptance_ratio"] = "x"
    (tmp_path / "validation.json").write_text(json.dumps(data))
    summary = read_validation(tmp_path)
    assert summary.state == "unreadable" and "metrics.engine_walk.acceptance_ratio" in summary.problem


def metric_key_reads(path: Path) -> list[str]:
    """`x["KEY"]` read (not assigned), `x.get("KEY")` and `x.metric("KEY")` with a validation metric's key."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "metric") and node.args and isinstance(node.args[0], ast.Constant):
            key = node.args[0].value
        if key in METRIC_KEYS:
            found.append(f"{path.name}:{node.lineno}: {key}")
    return found


def test_no_module_outside_records_reads_the_metrics_by_key():
    outside = [hit for name, path in modules().items() if not name.startswith("eagle3_quant.records.")
               for hit in metric_key_reads(path)]
    assert outside == []


def test_the_key_scan_catches_a_read(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('a = m["acceptance_length_fp8"]\nb = m.get("engine_walk")\nm["acceptance_ratio"] = 1\n')
    assert metric_key_reads(probe) == ["probe.py:1: acceptance_length_fp8", "probe.py:2: engine_walk"]
