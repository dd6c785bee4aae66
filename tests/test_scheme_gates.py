"""validate's default gates follow the artifact's scheme (eagle3_quant/scheme_gates.py); set gates win; the report
and the card say which applied."""

from __future__ import annotations

import json

import pytest
from validate_helpers import write_manifest_naming

from eagle3_quant.errors import SchemeError
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.records.validation_report import ValidationMetrics, read_validation
from eagle3_quant.scheme_gates import FP8_GATES, MXFP4_GATES, SCHEME_GATES, gates_for_scheme
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.validate.gate_choice import artifact_scheme
from eagle3_quant.validate.report import Gates, ValidationReport


def test_every_registered_scheme_has_gates_and_fp8_keeps_the_historical_ones():
    assert set(SCHEME_GATES) == set(SCHEMES)
    assert FP8_GATES.to_dict() == {"min_top1_agreement": 0.95, "min_acceptance_ratio": 0.99,
                                   "min_weight_sqnr_db": 25.0}
    assert gates_for_scheme(None) is FP8_GATES and gates_for_scheme("w_mxfp4_a_fp8") is MXFP4_GATES
    assert MXFP4_GATES.to_dict() == {"min_top1_agreement": 0.85, "min_acceptance_ratio": 0.98,
                                     "min_weight_sqnr_db": 15.0}
    for name, gates in SCHEME_GATES.items():     # MX gates are never stricter than FP8's
        assert all(getattr(gates, g) <= getattr(FP8_GATES, g) for g in FP8_GATES.to_dict()), name
    with pytest.raises(SchemeError, match="no default gates for scheme 'int4'"):
        gates_for_scheme("int4")


def test_unset_gates_take_the_scheme_default_and_set_ones_win():
    resolved, source = Gates(min_top1_agreement=0.5).resolve("w_mxfp4_a_mxfp4")
    assert resolved == Gates(0.5, 0.98, 15.0)
    assert source == {"min_top1_agreement": "set", "min_acceptance_ratio": "default for w_mxfp4_a_mxfp4",
                      "min_weight_sqnr_db": "default for w_mxfp4_a_mxfp4"}
    resolved, source = Gates().resolve(None)
    assert resolved == Gates(0.95, 0.99, 25.0) and source["min_weight_sqnr_db"] == "default for FP8 (scheme not " \
                                                                                   "recorded)"
    # an explicit value equal to FP8's still wins over an MX default
    assert Gates(min_weight_sqnr_db=25.0).resolve("w_mxfp4_a_fp8")[0].min_weight_sqnr_db == 25.0


def _mx(dtype: str, dynamic: bool) -> dict:
    return {"dtype": dtype, "qscheme": "per_group", "ch_axis": -1, "group_size": 32, "scale_format": "e8m0",
            "is_dynamic": dynamic}


def _config(weight: dict, inputs: dict) -> dict:       # the global config Quark exports (test_mx_schemes.py)
    return {"quant_method": "quark", "global_quant_config": {"weight": weight, "input_tensors": inputs}}


FP8_TENSOR = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False, "symmetric": True}
FP8_CHANNEL = {"dtype": "fp8_e4m3", "qscheme": "per_channel", "ch_axis": 0, "is_dynamic": False}


def test_the_artifact_scheme_comes_from_the_manifest_else_the_config(tmp_path):
    assert artifact_scheme(None, _config(_mx("fp6_e3m2", False), _mx("fp6_e3m2", True))) == \
        "w_mxfp6_e3m2_a_mxfp6_e3m2"
    assert artifact_scheme(None, _config(_mx("fp4", False), FP8_TENSOR)) == "w_mxfp4_a_fp8"
    assert artifact_scheme(None, _config(_mx("fp8_e4m3", False), _mx("fp8_e4m3", True))) == "w_mxfp8_a_mxfp8"
    ptpc = _config(FP8_CHANNEL, {**FP8_CHANNEL, "ch_axis": 1, "is_dynamic": True})
    assert artifact_scheme(None, ptpc) == "ptpc_fp8" and gates_for_scheme("ptpc_fp8") is FP8_GATES
    assert artifact_scheme(None, _config(_mx("fp4", False), {**FP8_TENSOR, "is_dynamic": True})) is None
    assert artifact_scheme(None, {}) is None                                   # no scheme: FP8's gates
    write_manifest_naming(tmp_path, "w_mxfp4_a_mxfp4")
    assert artifact_scheme(Manifest.read(tmp_path), ptpc) == "w_mxfp4_a_mxfp4"


def test_the_report_and_the_card_say_which_gates_applied(tmp_path):
    from eagle3_quant.export.card import _metric_rows

    gates, source = Gates(min_acceptance_ratio=0.97).resolve("w_mxfp6_e2m3_a_mxfp6_e2m3")
    report = ValidationReport(tmp_path, None, None, gates, (), ValidationMetrics(), (), {"status": "skipped"},
                              gate_source=source)
    data = json.loads(report.write(tmp_path / "validation.json").read_text())
    assert data["gates"]["min_acceptance_ratio"] == 0.97 and data["gate_source"]["min_acceptance_ratio"] == "set"
    assert data["gate_source"]["min_top1_agreement"] == "default for w_mxfp6_e2m3_a_mxfp6_e2m3"
    summary = read_validation(tmp_path)
    assert "min_acceptance_ratio >= 0.97 (set)" in summary.gates
    assert "min_weight_sqnr_db >= 25 (default for w_mxfp6_e2m3_a_mxfp6_e2m3)" in summary.gates
    assert ("validation gates", summary.gates) in _metric_rows(summary, "MXFP6")


def test_cli_gate_flags_default_to_the_scheme(monkeypatch, tmp_path):
    from eagle3_quant.cli import main

    seen = {}

    def fake_validate(out, options, **_):
        seen["gates"] = options.gates
        raise SystemExit(0)

    monkeypatch.setattr("eagle3_quant.validate.api.validate_draft", fake_validate)
    with pytest.raises(SystemExit):
        main(["validate", str(tmp_path), "--min-top1", "0.8"])
    assert seen["gates"] == Gates(min_top1_agreement=0.8)
