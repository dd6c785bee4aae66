"""SGLang 0.5.23's own loader on the MX artifacts of the tiny pair's draft (issue 14), run on CPU.

`w_mxfp4_a_mxfp4` loads through SGLang's ``QuarkW4A4MXFP4``; `w_mxfp4_a_fp8` and MXFP6 configs are refused by
SGLang's own ``QuarkConfig`` (no dense linear scheme), which is what `schemes.Scheme.engines` gates on. One
quantization and one SGLang child per artifact, shared by the tests of this module.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle3_quant.schemes import get_scheme
from eagle3_quant.validate import sglang_load
from eagle3_quant.validate.sglang_load import run_sglang, sglang_load_check

PAIR_DRAFT = Path(__file__).resolve().parent / "fixtures" / "tiny_pair" / "draft"
FUSED_NAMES = {"model.qkv_proj", "model.self_attn.o_proj", "model.gate_up_proj", "model.down_proj"}
W4A4 = "QuarkLinearMethod + QuarkW4A4MXFP4"
NO_DENSE_SCHEME = "No quark compatible scheme was found"          # SGLang's QuarkConfig._get_scheme_from_config

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sglang_load.sglang_missing() is not None,
                                                   reason=str(sglang_load.sglang_missing()))]


@pytest.fixture(scope="module")
def mx_artifact(tmp_path_factory, tiny_pair):
    """name -> MX artifact of the tiny pair's draft (quantized lazily, once per module)."""
    from eagle3_quant.quantize.api import quantize_draft

    root = tmp_path_factory.mktemp("sglang-mx")
    options = {"mxfp4": {"scheme": "w_mxfp4_a_mxfp4"},
               "mxfp4_exclude_mlp": {"scheme": "w_mxfp4_a_mxfp4", "exclude": ["mlp"]},
               "w4a8": {"scheme": "w_mxfp4_a_fp8", "calib": tiny_pair.calib, "engine": "vllm"}}
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = quantize_draft(PAIR_DRAFT, root / name, device="cpu", **options[name]).output
        return made[name]

    return get


@pytest.fixture(scope="module")
def mxfp4_check(mx_artifact):
    return sglang_load_check(mx_artifact("mxfp4"))


def methods(check) -> dict[str, str]:
    return {row["runtime_name"]: row["method"] for row in check.data["layers"]}


def test_mxfp4_artifact_loads_with_sglangs_w4a4_scheme(mxfp4_check):
    check = mxfp4_check
    assert check.status == "passed", check.detail
    built = methods(check)
    assert {name for name, method in built.items() if method == W4A4} == FUSED_NAMES
    assert built["model.fc"] == "Linear (no quant method)" and built["lm_head"] == "UnquantizedEmbeddingMethod"
    held = {row["runtime_name"]: row["checkpoint"] for row in check.data["layers"]}
    assert {held[name] for name in FUSED_NAMES} == {"mxfp4"} and held["model.fc"] == "bf16"
    # every tensor (packed U8 weights, E8M0 U8 scales, BF16 rest) byte-identical in SGLang's parameters
    assert check.data["skipped_on_purpose"] == ["t2d"]
    assert check.data["tensors_consumed"] == check.data["checkpoint_tensors"] - 1
    assert "model.qkv_proj MXFP4" in check.detail and "CPU patches" in check.detail
    assert "AITER" in check.data["mx_kernel"] and "not the gfx950 MX GEMM" in check.data["mx_kernel"]


def test_mxfp4_linears_and_logits_match_the_runtime(mxfp4_check):
    data = mxfp4_check.data
    assert data["linears_run"] == 4
    assert data["max_linear_rel_diff"] <= 1e-2
    forward = data["forward"]
    assert forward["logits_finite"] and forward["positions"] == 16
    assert forward["relative_dlogit"] <= 1e-2 and forward["top1_agreement"] >= 0.9


def test_mxfp4_with_mlp_excluded_keeps_the_mlp_bf16(mx_artifact):
    check = sglang_load_check(mx_artifact("mxfp4_exclude_mlp"))
    assert check.status == "passed", check.detail
    built = methods(check)
    assert {name for name, method in built.items() if method == W4A4} == {"model.qkv_proj", "model.self_attn.o_proj"}
    assert built["model.gate_up_proj"] == built["model.down_proj"] == "UnquantizedLinearMethod"


def test_w4a8_mxfp4_is_refused_by_sglangs_own_code(mx_artifact):
    artifact = mx_artifact("w4a8")
    # the check is skipped before any SGLang run, with the gating reason ...
    check = sglang_load_check(artifact)
    assert check.status == "skipped" and check.detail.startswith("the artifact is not for SGLang")
    assert check.detail.endswith(get_scheme("w_mxfp4_a_fp8").why_not("sglang"))
    # ... and SGLang's own QuarkConfig, run on the artifact anyway, raises for a dense W4A8 MXFP4 linear
    result = run_sglang([str(artifact)])
    assert NO_DENSE_SCHEME in result["error"] and "'dtype': 'fp8_e4m3'" in result["error"]


def test_mxfp6_configs_are_refused_by_sglangs_own_code(mx_artifact, tmp_path):
    """SGLang 0.5.23 has no dense MXFP6 scheme: a Quark MXFP6 config is refused when the model is built (before any
    tensor is read, so the MXFP4 tensors under the edited config do not matter)."""
    for element in ("fp6_e2m3", "fp6_e3m2"):
        folder = tmp_path / element
        shutil.copytree(mx_artifact("mxfp4"), folder)
        config = json.loads((folder / "config.json").read_text())
        spec = config["quantization_config"]["global_quant_config"]
        spec["weight"]["dtype"] = spec["input_tensors"]["dtype"] = element
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        result = run_sglang([str(folder)])
        assert NO_DENSE_SCHEME in result["error"] and f"'dtype': '{element}'" in result["error"], result
