"""`validate` writes only into what it owns: a BF16 draft folder is refused (nothing written into the source), and
a quantized folder without this tool's manifest is validated only with its report going elsewhere (--report).
Tables name the artifact's scheme, from the scheme registry (`schemes.scheme_label`), never "FP8" for MX."""

from __future__ import annotations

import shutil

import pytest
from corpus.builders import tree_state

from eagle3_quant.cli import main
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.schemes import ELEMENT_DTYPES, SCHEMES, scheme_label
from eagle3_quant.validate.api import validate_draft
from fixtures.synthetic import write_synthetic_draft


def cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_a_bf16_draft_is_no_artifact_and_nothing_is_written_into_it(tmp_path, capsys):
    src = write_synthetic_draft(tmp_path / "draft", "tiny")
    before = tree_state(tmp_path)
    with pytest.raises(DraftFormatError) as info:
        validate_draft(src, kernel=False, vllm=False, sglang=False)
    assert str(info.value) == (f"{src}: holds no quantized weights and no {MANIFEST_NAME}: a BF16 draft, not an "
                               "artifact (validate what `eagle3-quant quantize` writes from it, with this folder as "
                               "--reference)")
    code, _, err = cli(["validate", str(src), "--report", str(tmp_path / "r.json")], capsys)
    assert code == 2 and err == f"error: {info.value}\n"      # refused wherever the report would go
    assert tree_state(tmp_path) == before


def test_a_quantized_folder_without_our_manifest_is_validated_only_from_outside(quantized_tiny, tmp_path, capsys):
    src, built = quantized_tiny()
    out = tmp_path / "theirs"
    shutil.copytree(built, out, ignore=shutil.ignore_patterns(".*", "validation.json", MANIFEST_NAME))
    before = tree_state(out)
    for report in (None, out / "inside.json"):
        with pytest.raises(DraftFormatError, match=f"has no {MANIFEST_NAME}: not an artifact eagle3-quant wrote.*"
                                                   r"\(pass --report PATH to validate it without writing into it\)"):
            validate_draft(out, reference=src, report=report, kernel=False, vllm=False, sglang=False)
    code, _, err = cli(["validate", str(out), "--no-kernel"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--report PATH" in err
    outside = tmp_path / "report.json"
    result = validate_draft(out, reference=src, report=outside, kernel=False, vllm=False, sglang=False)
    assert result.report_path == outside and outside.is_file() and result.check("manifest").status == "skipped"
    assert tree_state(out) == before


def test_every_scheme_is_labelled_by_its_own_weight_element():
    for name, scheme in SCHEMES.items():
        label = scheme_label(name)
        assert label == scheme.weight.describe().partition(" per")[0] and label, name
        if scheme.mx:
            assert "FP8" not in label or label.startswith("MXFP8"), (name, label)
    assert scheme_label("w_mxfp4_a_mxfp4") == ELEMENT_DTYPES["fp4"][0] == "MXFP4 E2M1"
    assert scheme_label(None) == scheme_label("ptpc_fp8") == "FP8 E4M3"


def test_inspect_and_the_loader_table_name_the_scheme(tmp_path, capsys):
    from eagle3_quant.cli.render import print_loader_check
    from eagle3_quant.engines.vllm.loader_compat import check_loader_compat

    src = write_synthetic_draft(tmp_path / "draft", "tiny")
    code, out, _ = cli(["inspect", str(src), "--scheme", "w_mxfp4_a_mxfp4"], capsys)
    rows = [line for line in out.splitlines() if "midlayer." in line]
    assert code == 0 and rows and all("MXFP4 E2M1" in r or "BF16" in r for r in rows)
    assert not any("FP8" in r for r in rows), rows
    exclude = ["re:.*fc$", "re:.*lm_head$"]
    config = {"quant_method": "quark", "exclude": exclude, "layer_quant_config": {}, "layer_type_quant_config": {},
              "export": {"kv_cache_group": [], "pack_method": "reorder"},
              "global_quant_config": {"weight": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                                                 "is_dynamic": False, "scale_format": "e8m0"},
                                      "input_tensors": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32,
                                                        "is_dynamic": True, "scale_format": "e8m0"}}}
    intended = {"fc": False, "lm_head": False, **dict.fromkeys(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                  "up_proj", "down_proj"), True)}
    print_loader_check(check_loader_compat(config, intended, depths=[61]), scheme_label("w_mxfp4_a_mxfp4"))
    table = capsys.readouterr().out
    assert "model.layers.61.mlp.down_proj" in table and table.count("MXFP4 E2M1") >= 8 and " FP8 " not in table
