"""The sglang_load check: SGLang 0.5.23's own loader (installed by `make setup-sglang`) judges our artifacts.

Artifacts are quantized from the committed tiny pair's draft; each is loaded once by SGLang in a child process.
Without SGLang these tests report skipped, with the reason; the skip path itself is tested always.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.validate import sglang_load
from eagle3_quant.validate.sglang_load import sglang_load_check

PAIR_DRAFT = Path(__file__).resolve().parent / "fixtures" / "tiny_pair" / "draft"
FUSED_NAMES = {"model.qkv_proj", "model.self_attn.o_proj", "model.gate_up_proj", "model.down_proj"}
needs_sglang = pytest.mark.skipif(sglang_load.sglang_missing() is not None,
                                  reason=str(sglang_load.sglang_missing()))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, tiny_pair):
    """name -> FP8 artifact of the tiny pair's draft (quantized lazily, once per module)."""
    from eagle3_quant.quantize.api import quantize_draft

    root = tmp_path_factory.mktemp("sglang-artifacts")
    made: dict[str, Path] = {"ptpc": tiny_pair.fp8}
    options = {"exclude_qkv_proj": {"exclude": ["qkv_proj"]}, "exclude_mlp": {"exclude": ["mlp"]},
               "exclude_down_proj": {"exclude": ["down_proj"]}, "quantize_fc": {"quantize_fc": True},
               "static": {"scheme": "fp8", "calib": tiny_pair.calib}}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = quantize_draft(PAIR_DRAFT, root / name, device="cpu", **options[name]).output
        return made[name]

    return get


@pytest.fixture(scope="module")
def judged(artifacts):
    """name -> the sglang_load Check (one SGLang child per artifact)."""
    seen = {}

    def get(name: str, folder: Path | None = None):
        if name not in seen:
            seen[name] = sglang_load_check(folder or artifacts(name))
        return seen[name]

    return get


def fp8_in_sglang(check) -> set[str]:
    return {row["runtime_name"] for row in check.data["layers"] if row["quantized"]}


def with_exclude(src: Path, dst: Path, exclude: list[str]) -> Path:
    """A copy of artifact `src` whose config carries another exclude list (what a hand edit or Quark writes)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"]["exclude"] = exclude
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def test_without_sglang_the_check_is_skipped_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(sglang_load.importlib.util, "find_spec", lambda name: None)
    check = sglang_load_check(tmp_path)
    assert check.status == "skipped" and "make setup-sglang" in check.detail


@pytest.mark.slow
@needs_sglang
def test_ptpc_artifact_loads_as_planned(judged):
    check = judged("ptpc")
    assert check.status == "passed", check.detail
    assert fp8_in_sglang(check) == FUSED_NAMES
    methods = {row["runtime_name"]: row["method"] for row in check.data["layers"]}
    assert methods["model.fc"] == "Linear (no quant method)"           # a plain nn.Linear in SGLang
    assert methods["lm_head"] == "UnquantizedEmbeddingMethod"
    assert methods["model.qkv_proj"] == "QuarkLinearMethod + QuarkW8A8Fp8"
    assert check.data["skipped_on_purpose"] == ["t2d"]
    assert check.data["tensors_consumed"] == check.data["checkpoint_tensors"] - 1
    assert check.data["from_target"] == ["model.embed_tokens.weight"]   # the pair's draft has no embedding
    assert check.data["linears_run"] == 4 and check.data["max_linear_rel_diff"] <= 1e-3
    forward = check.data["forward"]                # the runtime draft with SGLang's linears: measured 0
    assert forward["relative_dlogit"] <= 1e-3 and forward["top1_agreement"] == 1.0


@pytest.mark.slow
@needs_sglang
@pytest.mark.parametrize(("name", "kept_bf16"), [("exclude_qkv_proj", {"model.qkv_proj"}),
                                                 ("exclude_mlp", {"model.gate_up_proj", "model.down_proj"}),
                                                 ("exclude_down_proj", {"model.down_proj"})])
def test_excluded_layers_load_bf16(judged, name, kept_bf16):
    check = judged(name)
    assert check.status == "passed", check.detail
    assert fp8_in_sglang(check) == FUSED_NAMES - kept_bf16


@pytest.mark.slow
@needs_sglang
def test_static_fp8_artifact_loads(judged):
    check = judged("static")
    assert check.status == "passed", check.detail
    assert fp8_in_sglang(check) == FUSED_NAMES and check.data["max_linear_rel_diff"] <= 1e-2
    # SGLang's static FP8 down_proj quantizes the SiLU-mul the runtime hands it, rounded to bf16 as vLLM's fused
    # silu_and_mul_quant rounds it: bit-identical logits (1.4% of max |logit| when the runtime kept it in fp32)
    forward = check.data["forward"]
    assert forward["relative_dlogit"] == 0.0 and forward["top1_agreement"] == 1.0


@pytest.mark.slow
@needs_sglang
def test_quantized_fc_loses_its_scale(judged, artifacts, tmp_path):
    # --quantize-fc with --engine auto: the artifact is for vLLM only, and the check says so without running
    left_out = judged("quantize_fc")
    assert left_out.status == "skipped" and "not for SGLang" in left_out.detail and "fc in FP8" in left_out.detail
    # what SGLang does with it anyway (the evidence for leaving SGLang out): the same files without the manifest
    anyway = shutil.copytree(artifacts("quantize_fc"), tmp_path / "anyway",
                             ignore=shutil.ignore_patterns(MANIFEST_NAME))
    check = judged("quantize_fc without its manifest", anyway)
    assert check.status == "failed"
    assert "model.fc: SGLang builds it unquantized" in check.detail
    assert "fc.weight_scale: SGLang has no parameter for it" in check.detail
    assert "model.fc.weight: holds bfloat16, the checkpoint's fc.weight is float8_e4m3fn: cast on load" in check.detail
    # the cast fc in the draft's forward: measured 1.38 x max |logit|, top-1 0 of 16
    assert "the draft's logits with SGLang's linears differ from the runtime's" in check.detail
    assert check.data["forward"]["top1_agreement"] < 0.5


@pytest.mark.slow
@needs_sglang
def test_quarks_plain_exclude_list_measured(judged, artifacts, tmp_path):
    # default plan: SGLang never quantizes fc (plain nn.Linear) or lm_head (ParallelLMHead), so the plain list loads
    plain = with_exclude(artifacts("ptpc"), tmp_path / "plain", ["fc", "lm_head"])
    check = judged("plain", plain)
    assert check.status == "passed", check.detail
    assert fp8_in_sglang(check) == FUSED_NAMES
    # with down_proj kept BF16, Quark's plain module name matches nothing SGLang builds: FP8 over BF16 weights
    plain_down = with_exclude(artifacts("exclude_down_proj"), tmp_path / "plain-down",
                              ["fc", "lm_head", "midlayer.mlp.down_proj"])
    check = judged("plain_down", plain_down)
    assert check.status == "failed"
    assert "model.down_proj: SGLang builds it FP8" in check.detail


@pytest.mark.slow
@needs_sglang
def test_per_shard_patterns_load_the_fused_layer_fp8(judged, artifacts, tmp_path):
    """The patterns written before the fused runtime names were added: SGLang matches qkv by its fused name."""
    old = [r"re:(.*\.)?fc$", r"re:(.*\.)?self_attn\.q_proj$", r"re:(.*\.)?self_attn\.k_proj$",
           r"re:(.*\.)?self_attn\.v_proj$", r"re:(.*\.)?lm_head$"]
    check = judged("per_shard", with_exclude(artifacts("exclude_qkv_proj"), tmp_path / "old", old))
    assert check.status == "failed"
    assert "model.qkv_proj: SGLang builds it FP8 (QuarkLinearMethod + QuarkW8A8Fp8) over the checkpoint's BF16" \
        in check.detail


def test_setup_installs_only_what_is_missing_and_never_torch():
    from eagle3_quant.engines.install import to_install

    todo = to_install("pytest==0.0.1", ["torch==1.0", "transformers==1.0", "ruff==0.0.1", "no-such-dist-xyz==1.0"])
    assert todo == ["pytest==0.0.1", "no-such-dist-xyz==1.0"]   # the engine at its exact version; ruff kept as is


@pytest.mark.parametrize(("fmt", "why"), [("speculators", "no model_type: a speculators config"),
                                          ("eagle", "builds the class the config names (LlamaForCausalLM)")])
def test_formats_sglang_cannot_build_are_skipped_with_the_reason(make_draft, fmt, why):
    from eagle3_quant.reading.formats import DraftFormat

    check = sglang_load_check(make_draft(DraftFormat(fmt)))      # measured: SGLang's own loader raises on both
    assert check.status == "skipped" and why in check.detail and "LlamaForCausalLMEagle3" in check.detail
