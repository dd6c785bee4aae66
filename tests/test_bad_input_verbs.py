"""Every case of tests/corpus/verb_cases.py through the real CLI: exit 2, one `error:` line naming the file or
field, no traceback, nothing written or changed under the case's root, and no Hub request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus import verb_cases
from corpus.builders import tree_state
from corpus.verb_cases import VERB_CASES, VerbCase

from eagle3_quant.cli import main
from eagle3_quant.errors import Eagle3QuantError


@pytest.fixture
def no_hub(monkeypatch):
    """Any Hub request fails the test (the cases must be refused before one)."""
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"a Hub request was made: {args} {kwargs}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("snapshot_download", "hf_hub_download"):
        monkeypatch.setattr(huggingface_hub, name, refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "_build_hf_headers", refuse, raising=False)


def test_every_verb_is_covered_and_the_readme_says_so():
    verbs = {c.id.split("-")[0] for c in VERB_CASES}
    assert verbs >= {"validate", "push", "card", "inspect", "run", "sensitivity", "calibrate", "estimate"}
    guarantees = (Path(__file__).resolve().parent.parent / "docs" / "guarantees.md").read_text()
    assert f"({len(VERB_CASES)} verb cases:" in guarantees


def prepare_case(case: VerbCase, tmp_path, monkeypatch, quantized_tiny):
    """The case's folder built, its tree state taken, and the working directory moved into it."""
    verb_cases.QUANTIZED[:] = [quantized_tiny()[1]]
    root = tmp_path / "case"
    root.mkdir()
    args = case.build(root)
    before = tree_state(root)
    monkeypatch.chdir(root)
    return root, args, before


@pytest.mark.parametrize("case", VERB_CASES, ids=lambda c: c.id)
def test_verb_refuses_in_one_line_and_leaves_nothing(case: VerbCase, tmp_path, monkeypatch, capsys, no_hub,
                                                     quantized_tiny):
    root, args, before = prepare_case(case, tmp_path, monkeypatch, quantized_tiny)
    monkeypatch.delenv("EAGLE3_QUANT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = err.splitlines()       # a progress bar may come first (calibrate --from-dump reads samples)
    assert lines[-1].startswith("error: ") and sum(x.startswith("error: ") for x in lines) == 1, err
    assert "Traceback" not in err and err.endswith("\n"), err
    err = lines[-1]
    for part in case.says:
        assert part in err, (part, err)
    assert tree_state(root) == before


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def call_api(args: list[str]):
    """The public function each verb calls, with the same inputs as the CLI arguments."""
    from eagle3_quant.calib.importer import import_calibration
    from eagle3_quant.export.card import make_card
    from eagle3_quant.export.push import push_draft
    from eagle3_quant.inspection import inspect_draft
    from eagle3_quant.pipeline import run_pipeline
    from eagle3_quant.quantize.sensitivity import measure_sensitivity
    from eagle3_quant.speedup import estimate_draft
    from eagle3_quant.validate.api import validate_draft

    verb, first = args[0], args[1]
    if verb == "validate":
        sqnr = _option(args, "--min-sqnr-db")
        return validate_draft(first, calib=_option(args, "--calib"), kernel=False, device=_option(args, "--device"),
                              gates={"min_weight_sqnr_db": float(sqnr)} if sqnr else None)
    names = {"target": _option(args, "--target"), "base_model": _option(args, "--base-model")}
    if verb == "push":
        return push_draft(first, _option(args, "--repo-id"), dry_run=True, **names)
    if verb == "card":
        return make_card(first, _option(args, "--repo-id"), **names)
    if verb == "estimate":
        return estimate_draft(first, float(_option(args, "--verify-ms")), validation=_option(args, "--validation"),
                              write="--write" in args)
    if verb == "inspect":
        return inspect_draft(first)
    if verb == "run":
        return run_pipeline(first, [_option(args, "--set")] if "--set" in args else None)
    if verb == "sensitivity":
        return measure_sensitivity(first, _option(args, "--calib"), device="cpu")
    if verb == "calibrate":
        return import_calibration(_option(args, "--from-dump"), _option(args, "--draft"), first)
    if verb == "gguf":
        from eagle3_quant.quantize.gguf_api import gguf_draft

        return gguf_draft(first, args[2], target=_option(args, "--target"), calib=_option(args, "--calib"),
                          pre_tokenizer=_option(args, "--pre-tokenizer"))
    if verb == "bench" and _option(args, "--engine") == "llamacpp":
        from eagle3_quant.bench.llamacpp_api import bench_gguf

        return bench_gguf(first, target=_option(args, "--target"),
                          slots=tuple(int(n) for n in _option(args, "--slots").split(",")))
    if verb == "bench":
        from eagle3_quant.bench.api import bench_draft

        return bench_draft(first, target=_option(args, "--target"),
                           engine_args=json.loads(_option(args, "--engine-args")))
    raise AssertionError(verb)


@pytest.mark.parametrize("case", VERB_CASES, ids=lambda c: c.id)
def test_api_raises_one_typed_error_and_leaves_nothing(case: VerbCase, tmp_path, monkeypatch, no_hub,
                                                       quantized_tiny):
    root, args, before = prepare_case(case, tmp_path, monkeypatch, quantized_tiny)
    with pytest.raises(Eagle3QuantError) as info:
        call_api(args)
    error = info.value
    assert error.path or error.field, repr(error)
    assert "\n" not in str(error)
    for part in case.says:
        assert part in str(error), (part, str(error))
    assert tree_state(root) == before
