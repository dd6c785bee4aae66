"""`--engine auto` (the default): the engines whose code serves this draft's format, the scheme and fc's precision;
refused only when none can, or when the user names one that cannot (eagle3_quant/engines/choice.py)."""

from __future__ import annotations

import json

import pytest
from draft_variants import write_variant

from eagle3_quant.engines.choice import check_choice, choose_engines
from eagle3_quant.errors import SchemeError
from eagle3_quant.inspection import inspect_draft
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.schemes import get_scheme

# the formats people publish: speculators (vLLM's own drafts), original EAGLE, SpecForge, a Qwen3-class draft
PUBLISHED = {"speculators": ("vllm",), "eagle-default-theta": ("vllm",), "specforge": ("vllm", "sglang"),
             "qwen3": ("vllm",)}
SGLANG_FIELD = {"speculators": "model_type", "eagle-default-theta": "architectures", "qwen3": "architectures"}


def _choice(tmp_path, variant, requested="auto", scheme="ptpc_fp8", fc=False):
    draft = read_draft(write_variant(tmp_path / variant, variant))
    return draft, choose_engines(requested, draft.config, draft.format, get_scheme(scheme) if scheme else None, fc)


@pytest.mark.parametrize("variant", PUBLISHED)
def test_auto_takes_the_engines_that_serve_each_published_format(tmp_path, variant):
    draft, choice = _choice(tmp_path, variant)
    assert choice.engines == PUBLISHED[variant] and choice.requested == "auto"
    left = dict(choice.left_out)
    if variant in SGLANG_FIELD:
        assert set(left) == {"sglang"} and left["sglang"].startswith(f"SGLang 0.5.23 refuses {SGLANG_FIELD[variant]}")
        assert choice.describe().startswith("vLLM 0.33 (SGLang 0.5.23 left out: SGLang 0.5.23 refuses")
    else:
        assert left == {} and choice.describe() == "vLLM 0.33, SGLang 0.5.23"
    check_choice(choice, draft.config, draft.format, get_scheme("ptpc_fp8"), False, "config.json")   # no refusal


def test_the_scheme_and_an_fp8_fc_leave_sglang_out(tmp_path):
    _, mx = _choice(tmp_path, "specforge", scheme="w_mxfp4_a_fp8")
    assert mx.engines == ("vllm",)
    assert dict(mx.left_out)["sglang"].startswith("SGLang 0.5.23 cannot load scheme w_mxfp4_a_fp8: SGLang 0.5.23's "
                                                  "Quark loader has no dense linear scheme")
    _, fc = _choice(tmp_path / "fc", "specforge", fc=True)
    assert fc.engines == ("vllm",) and "cannot load fc in FP8 (--quantize-fc)" in dict(fc.left_out)["sglang"]
    assert fc.to_dict() == {"requested": "auto", "serves": ["vllm"], "left_out": dict(fc.left_out)}
    _, named = _choice(tmp_path / "named", "specforge", requested="vllm")
    assert named.engines == ("vllm",) and named.left_out == (("sglang", "not asked for (--engine vllm)"),)


def test_named_engines_that_cannot_are_refused_auto_only_when_none_can(tmp_path):
    with pytest.raises(SchemeError) as err:
        QuantizeOptions(quantize_fc=True, engine="both")
    assert err.value.field == "quantize_fc" and "SGLang 0.5.23 cannot load fc in FP8" in err.value.message
    assert QuantizeOptions(quantize_fc=True).engine == "auto"                     # auto: vLLM alone, no refusal
    QuantizeOptions(scheme="w_mxfp6_e2m3_a_mxfp6_e2m3")                            # formerly needed --engine vllm
    with pytest.raises(SchemeError, match="cannot be served by sglang"):
        QuantizeOptions(scheme="w_mxfp6_e2m3_a_mxfp6_e2m3", engine="both")
    # SGLang alone serves this MLA draft (vLLM reads model_type deepseek_v3 as an MTP draft), and SGLang has no
    # loader for MXFP4 weights with FP8 activations: auto finds no engine, and says why for each
    folder = write_variant(tmp_path / "mla", "mla")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "deepseek_v3"}))
    draft = read_draft(folder)
    scheme = get_scheme("w_mxfp4_a_fp8")
    choice = choose_engines("auto", draft.config, draft.format, scheme)
    assert choice.engines == ()
    with pytest.raises(SchemeError) as err:
        check_choice(choice, draft.config, draft.format, scheme, False, folder / "config.json")
    assert err.value.field == "scheme" and "\n" not in str(err.value)
    assert err.value.message.startswith("no engine can serve this draft as asked: vLLM 0.33 refuses model_type")
    assert "SGLang 0.5.23 cannot load scheme w_mxfp4_a_fp8" in err.value.message
    assert choose_engines("auto", draft.config, draft.format, get_scheme("ptpc_fp8")).engines == ("sglang",)


def test_inspect_says_what_quantize_would_write_it_for(tmp_path):
    report = inspect_draft(write_variant(tmp_path / "s", "speculators"))
    assert report.artifact_engines["serves"] == ["vllm"] and report.artifact_engines["requested"] == "auto"
    assert report.artifact_engines["left_out"]["sglang"].startswith("SGLang 0.5.23 refuses model_type")
    both = inspect_draft(write_variant(tmp_path / "f", "specforge"), quantize_fc=True)
    assert both.artifact_engines["serves"] == ["vllm"]
    assert "--quantize-fc" in both.artifact_engines["left_out"]["sglang"]


@pytest.mark.slow
def test_quantize_with_no_flags_on_every_published_format_and_vllm_loads_each(tmp_path, capsys):
    """The issue's first-contact case: `eagle3-quant quantize SRC OUT` succeeds on a speculators, an original EAGLE,
    a SpecForge and a Qwen3 draft; vLLM 0.33's own code loads every artifact; one no engine serves is refused."""
    from eagle3_quant.cli import main
    from eagle3_quant.export.card import build_card
    from eagle3_quant.validate.vllm_load import run_vllm_load_many, vllm_missing_reason

    outs = {}
    for variant in PUBLISHED:
        src = write_variant(tmp_path / variant, variant)
        outs[variant] = tmp_path / f"{variant}-fp8"
        with pytest.raises(SystemExit) as exit_info:
            main(["quantize", str(src), str(outs[variant])])
        assert exit_info.value.code in (0, None), capsys.readouterr().err
        printed = capsys.readouterr().out
        engines = Manifest.read(outs[variant]).engines
        assert engines.requested == "auto" and tuple(engines.serves) == PUBLISHED[variant]
        assert set(engines.left_out) == {"vllm", "sglang"} - set(PUBLISHED[variant])
        assert "for vLLM 0.33" in " ".join(printed.split())
        card = build_card(outs[variant], "org/x-fp8", target="org/target", base_model="org/draft").text
        assert "| serving engines | vLLM 0.33" in card
        assert ("This artifact is not for SGLang" in card) == (variant != "specforge")
    nq = write_variant(tmp_path / "nq", "mla-no-q-lora")
    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(nq), str(tmp_path / "nq-fp8")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "no engine serves it" in err[0]
    assert not (tmp_path / "nq-fp8").exists()
    if vllm_missing_reason():
        pytest.skip(vllm_missing_reason())
    results = run_vllm_load_many(list(outs.values()))
    for variant, result in zip(outs, results, strict=True):
        assert result.get("ok"), (variant, result.get("error") or result)
