"""vLLM 0.33's own code judges our artifacts: config, QuarkConfig, model class, loader, forward (on CPU).

Each artifact is a real Quark output of the tiny draft; one worker process runs vLLM for all of them.
Skipped, with the reason, only where vLLM is not installed (`make test` installs it: `make setup-vllm`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from vllm_artifacts import VARIANTS, build_variant, with_quark_plain_exclude

from eagle3_quant.engines.vllm.loader_compat import check_loader_compat
from eagle3_quant.validate.vllm_load import (
    MAX_RELATIVE_DLOGIT,
    MIN_TOP1,
    check_vllm_load,
    run_vllm_load_many,
    vllm_load_check,
    vllm_missing_reason,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(vllm_missing_reason() is not None, reason=str(vllm_missing_reason()))]

FORWARD_TARGETS = ("ptpc", "static", "speculators", "speculators-nbr", "eagle-fp16")
ALL = (*VARIANTS, "quark-plain")
LAYER = {"qkv_proj": "model.layers.0.self_attn.qkv_proj", "o_proj": "model.layers.0.self_attn.o_proj",
         "gate_up_proj": "model.layers.0.mlp.gate_up_proj", "down_proj": "model.layers.0.mlp.down_proj",
         "fc": "model.fc", "lm_head": "lm_head"}


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """name -> (artifact, vLLM worker result), for every plan variant and Quark's plain exclude list."""
    root = tmp_path_factory.mktemp("vllm-load")
    paths = {name: build_variant(root, name) for name in VARIANTS}
    paths["quark-plain"] = with_quark_plain_exclude(paths["ptpc"], root / "quark-plain")
    results = run_vllm_load_many(list(paths.values()))
    return {name: (path, result) for (name, path), result in zip(paths.items(), results, strict=True)}


def methods(result: dict) -> dict[str, str]:
    by_module = {module: info["quant_method"] for module, info in result["linears"].items()}
    return {role: by_module[module] for role, module in LAYER.items()}


@pytest.mark.parametrize("name", FORWARD_TARGETS)
def test_artifact_loads_and_runs_in_vllm_as_in_the_runtime(judged, name):
    _, result = judged[name]
    assert result["ok"], result.get("traceback")
    check = vllm_load_check(result)
    assert check.status == "passed", check.detail
    assert methods(result) == {"qkv_proj": "QuarkLinearMethod", "o_proj": "QuarkLinearMethod",
                               "gate_up_proj": "QuarkLinearMethod", "down_proj": "QuarkLinearMethod",
                               "fc": "UnquantizedLinearMethod", "lm_head": "UnquantizedEmbeddingMethod"}
    assert {info["scheme"] for info in result["linears"].values()} == {"QuarkW8A8Fp8", None}
    assert result["skipped_on_purpose"] == ["t2d"] and result["identical"] == result["tensors"] - 1
    assert result["not_consumed"] == [] and result["not_identical"] == [] and result["uninitialized"] == []
    logits = result["logits"]
    assert logits["vllm_logits_finite"] and logits["positions"] == 64
    assert logits["relative_dlogit"] <= MAX_RELATIVE_DLOGIT and logits["top1_agreement"] >= MIN_TOP1
    assert "fp32" in check.data["attention"] and "replaced" in check.data["attention"]


def test_static_artifact_keeps_its_input_scales_through_vllm(judged):
    _, result = judged["static"]
    assert result["architecture"] == "Eagle3LlamaForCausalLM"
    assert result["identical"] == result["tensors"] - 1     # input_scale and per-tensor weight_scale included


@pytest.mark.parametrize(("name", "bf16"), [
    ("exclude-qkv", {"qkv_proj"}), ("exclude-mlp", {"gate_up_proj", "down_proj"}), ("exclude-down", {"down_proj"}),
    ("exclude-o", {"o_proj"}), ("exclude-attention", {"qkv_proj", "o_proj"}), ("exclude-gate-up", {"gate_up_proj"}),
    ("quantize-fc", set())])
def test_excluded_layers_load_unquantized_in_vllm(judged, name, bf16):
    _, result = judged[name]
    check = vllm_load_check(result)
    assert check.status == "passed", check.detail
    got = methods(result)
    for role in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        assert got[role] == ("UnquantizedLinearMethod" if role in bf16 else "QuarkLinearMethod"), role
    assert got["fc"] == ("QuarkLinearMethod" if name == "quantize-fc" else "UnquantizedLinearMethod")


def test_quark_plain_exclude_list_loads_fc_as_fp8_with_nan_logits(judged):
    """What vLLM 0.33 really does with Quark's ["fc", "lm_head"]: no error, fc FP8, NaN logits."""
    _, result = judged["quark-plain"]
    assert result["ok"]
    assert methods(result)["fc"] == "QuarkLinearMethod"
    assert "model.fc.weight_scale" in result["uninitialized"]
    assert any(entry.startswith("fc.weight -> model.fc.weight") for entry in result["not_identical"])
    assert not result["logits"]["vllm_logits_finite"]
    check = vllm_load_check(result)
    assert check.status == "failed"
    assert "model.fc: vLLM built QuarkLinearMethod" in check.detail and "not finite" in check.detail


@pytest.mark.parametrize("name", ALL)
def test_fast_replay_agrees_with_vllms_own_quark_config(judged, name):
    """The data-free replay inside `quantize` predicts, per runtime layer, the quant method vLLM chose."""
    path, result = judged[name]
    quant_config = json.loads((path / "config.json").read_text())["quantization_config"]
    replay = check_loader_compat(quant_config, depths=[result["target_layers"]])
    predicted = {layer.runtime_name: layer.quantized for layer in replay.layers}
    chose = {info["prefix"]: info["quant_method"] == "QuarkLinearMethod" for info in result["linears"].values()}
    assert predicted == chose


def test_check_without_vllm_is_skipped_with_the_reason(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    check = check_vllm_load(tmp_path)
    assert check.status == "skipped" and "make setup-vllm" in check.detail


def test_validate_reports_the_vllm_check(judged):
    from eagle3_quant.validate.api import validate_draft

    path, _ = judged["ptpc"]
    report = validate_draft(path, kernel=False)
    check = report.check("vllm_load")
    assert check.status == "passed", check.detail
    assert check.data["wall_s"] > 0          # its time is measured by `make bench-vllm`, not asserted here
    off = validate_draft(path, kernel=False, vllm=False)
    assert off.check("vllm_load").status == "skipped" and "--no-vllm" in off.check("vllm_load").detail
