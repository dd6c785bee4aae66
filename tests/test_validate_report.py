"""The report object: gates from data, gate decisions, JSON without invented numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eagle3_quant.errors import OptionsError
from eagle3_quant.records.validation_report import ValidationMetrics
from eagle3_quant.util.json_values import json_safe
from eagle3_quant.validate.report import Gates, ValidationReport, gate, passed, skipped


def test_gates_from_a_mapping_refuse_unknown_names():
    assert Gates.from_value(None) == Gates()
    assert Gates.from_value({"min_top1_agreement": 0.9}) == Gates(min_top1_agreement=0.9)
    with pytest.raises(OptionsError, match="min_top1_agreement"):
        Gates.from_value({"min_top1": 0.9})


def test_gate_decisions():
    assert gate("g", 0.99, 0.98, "x").status == "passed"
    assert gate("g", 0.97, 0.98, "x").status == "failed"
    unmeasured = gate("g", math.nan, 0.98, "x")
    assert unmeasured.status == "failed" and unmeasured.data["value"] is None


def test_json_keeps_missing_measurements_null_and_skipped_is_not_passed(tmp_path):
    report = ValidationReport(Path("/o"), None, None, Gates(), (passed("a", "ok", value=1.5),
                                                                 skipped("b", "needs calibration data")),
                              ValidationMetrics.read(json_safe({"kl": math.nan, "k": 3})), (),
                              {"status": "skipped", "reason": "no GPU"})
    data = json.loads(report.write(tmp_path / "r.json").read_text())
    assert data["report_version"] == 1 and data["passed"] is True
    assert data["metrics"] == {"kl": None, "k": 3}
    assert data["checks"][1] == {"name": "b", "status": "skipped", "detail": "needs calibration data"}
    assert data["checks"][0]["value"] == 1.5 and data["reference"] is None
