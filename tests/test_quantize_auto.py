"""`quantize --scheme auto`: the candidate ladder (step bytes from cost.py), its refusals, and on the tiny real
pair the measured choice that `validate` then confirms on the written artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from conftest import folder_hashes

from eagle3_quant.cli import main
from eagle3_quant.cost import WeightTensor, checkpoint_cost, project_scheme, step_cost
from eagle3_quant.errors import AcceptanceGateError, DraftFormatError, OptionsError, SchemeError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.auto_ladder import build_ladder, vocab_sizes
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.schemes import SCHEMES
from fixtures.synthetic import write_synthetic_draft


def test_vocab_sizes_only_where_the_calibration_set_ranks_them():
    assert vocab_sizes(768, 768) == ([384, 256, 192], [])
    sizes, skipped = vocab_sizes(768, 300)
    assert sizes == [256, 192] and skipped == ["vocab 384: the calibration set ranks only 300 of the draft's 768 "
                                               "tokens"]


def test_ladder_step_bytes_are_cost_py_s_and_ascending(tmp_path: Path):
    src = write_synthetic_draft(tmp_path / "src", "tiny")           # 256 of 512 tokens, with d2t
    draft = read_draft(src)
    ladder = build_ladder(draft, (), "both", [128, 64])
    names = [c.name for c in ladder.candidates]
    both = [s for s in SCHEMES if not any(SCHEMES[s].why_not(e) for e in ("vllm", "sglang"))]
    assert "w_mxfp4_a_mxfp4" in both and "w_mxfp4_a_fp8" not in both
    assert len(names) == len(both) * 3 and not any("fc FP8" in n for n in names)
    assert any(s.startswith("w_mxfp4_a_fp8: --engine both: scheme w_mxfp4_a_fp8 cannot be served by sglang")
               for s in ladder.skipped)
    assert {c.engines for c in ladder.candidates} == {("vllm", "sglang")}
    assert [c.step_bytes for c in ladder.candidates] == sorted(c.step_bytes for c in ladder.candidates)
    by_name = {c.name: c.step_bytes for c in ladder.candidates}
    assert by_name["ptpc_fp8"] == checkpoint_cost(src).written.total_bytes
    assert by_name["ptpc_fp8 + vocab 64"] == checkpoint_cost(src, draft_vocab=64).written.total_bytes
    assert ladder.bf16_step_bytes == checkpoint_cost(src).bf16.total_bytes
    tensors = [WeightTensor(n, i.shape, i.dtype) for n, i in sorted(draft.checkpoint.tensors.items())]
    assert by_name["w_mxfp4_a_mxfp4"] == step_cost(project_scheme(tensors, "w_mxfp4_a_mxfp4"), "").total_bytes
    assert by_name["w_mxfp4_a_mxfp4"] < by_name["ptpc_fp8"]
    assert any("fc FP8" in s and "SGLang" in s for s in ladder.skipped)
    vllm = build_ladder(draft, (), "vllm", [128])
    fc = {c.name: c.step_bytes for c in vllm.candidates}
    assert fc["w_mxfp4_a_fp8"] == step_cost(project_scheme(tensors, "w_mxfp4_a_fp8"), "").total_bytes
    assert fc["ptpc_fp8 + fc FP8"] < fc["ptpc_fp8"]
    assert fc["ptpc_fp8 + vocab 128 + fc FP8"] < fc["ptpc_fp8 + vocab 128"]
    assert build_ladder(draft, ("fc",), "vllm", []).skipped          # --exclude fc: no fc FP8 candidate
    # MXFP6 joins with --engine vllm, between MXFP4 and FP8 in step bytes; SGLang cannot load it
    assert fc["w_mxfp4_a_mxfp4"] < fc["w_mxfp6_e2m3_a_mxfp6_e2m3"] == fc["w_mxfp6_e3m2_a_mxfp6_e3m2"] < fc["ptpc_fp8"]
    assert any(s.startswith("w_mxfp6_e3m2_a_mxfp6_e3m2: --engine both: scheme w_mxfp6_e3m2_a_mxfp6_e3m2 cannot be "
                            "served by sglang") for s in ladder.skipped)
    # --engine auto (the default): every candidate an engine serves, each with the engines it would be for
    auto = build_ladder(draft, (), "auto", [128])
    engines = {c.name: c.engines for c in auto.candidates}
    assert {c.name for c in auto.candidates} == set(fc) and not any("fc FP8:" in s for s in auto.skipped)
    assert engines["ptpc_fp8"] == ("vllm", "sglang") and engines["w_mxfp4_a_mxfp4 + vocab 128"] == ("vllm", "sglang")
    assert engines["w_mxfp4_a_fp8"] == engines["ptpc_fp8 + fc FP8"] == ("vllm",)


def test_refusals_before_any_work(tmp_path: Path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=2)
    with pytest.raises(SchemeError, match="--calib"):
        QuantizeOptions(scheme="auto")
    for bad in (0, -0.5, 1.0001, float("nan")):
        with pytest.raises(OptionsError, match=r"\(0, 1\]"):
            QuantizeOptions(scheme="auto", calib=cal, min_acceptance_ratio=bad)
    with pytest.raises(OptionsError, match="engine"):
        QuantizeOptions(scheme="auto", calib=cal, engine="trt")
    with pytest.raises(SchemeError, match="--draft-vocab"):
        QuantizeOptions(scheme="auto", calib=cal, draft_vocab=64)
    with pytest.raises(SchemeError, match="--quantize-fc"):
        QuantizeOptions(scheme="auto", calib=cal, quantize_fc=True)
    other = write_calibration(tmp_path / "cal-other", tmp_path / "target", samples=2, target_hidden=32)
    with pytest.raises(DraftFormatError, match="target_hidden_size"):
        quantize_draft(src, tmp_path / "out", scheme="auto", calib=other, device="cpu")
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--scheme", "auto", "--calib", str(cal),
              "--min-acceptance-ratio", "1.0001"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "min_acceptance_ratio" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "cal-other", "src", "target"]


def not_greedy_calibration(folder: Path, target: Path, samples: int = 2, length: int = 24) -> Path:
    """Token ids the target never predicts next (target_next = id + 1): no chain start is a greedy continuation."""
    from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

    gen = torch.Generator().manual_seed(0)
    writer = CalibrationWriter(folder, CalibrationInfo(target=str(target), aux_layer_ids=(1, 2, 3),
                                                       target_hidden_size=64, source="tests"))
    for _ in range(samples):
        ids = torch.randint(0, 511, (length,), generator=gen)
        writer.add(CalibrationSample(ids, torch.randn(length, 3 * 64, generator=gen).to(torch.bfloat16), ids + 1))
    writer.flush()
    return folder


def test_no_measurable_chain_exits_1_and_writes_nothing(tmp_path: Path, capsys):
    """No ratio can be measured, so no candidate keeps a gate: exit 1, one line, nothing written."""
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = not_greedy_calibration(tmp_path / "cal", write_target(tmp_path / "target"))
    before = folder_hashes(src)
    with pytest.raises(AcceptanceGateError, match="no chain start"):
        quantize_draft(src, tmp_path / "out", scheme="auto", calib=cal, device="cpu")
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--scheme", "auto", "--calib", str(cal),
              "--device", "cpu"])
    assert exit_.value.code == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert folder_hashes(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "src", "target"]


AUTO_PROMPTS = 16      # the target's greedy continuations of 16 held-out prompts: ~800 chains, 9 draft passes each


@pytest.fixture(scope="module")
def auto_pair(tmp_path_factory):
    """The tiny real pair with a small calibration set of the target's own greedy continuations."""
    from safetensors.torch import load_file
    from tiny_pair_fixtures import NEW_TOKENS, PAIR, TinyPair, fixture_module

    capture = fixture_module("tiny_capture")
    root = tmp_path_factory.mktemp("auto-pair")
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()
    pair = TinyPair(PAIR / "target", PAIR / "draft", root / "unused", root / "calib", prompts)
    capture.write_calibration(capture.greedy_samples(pair.load_target(), prompts[:AUTO_PROMPTS], NEW_TOKENS),
                              pair.calib, str(pair.target))
    return pair


@pytest.fixture(scope="module")
def auto_on_tiny_pair(auto_pair, tmp_path_factory):
    """One `quantize --scheme auto` through the CLI on the tiny real pair: (out, manifest, stdout)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("auto") / "auto"
    printed = io.StringIO()
    with pytest.raises(SystemExit) as exit_, contextlib.redirect_stdout(printed):
        main(["quantize", str(auto_pair.draft), str(out), "--scheme", "auto", "--calib", str(auto_pair.calib),
              "--device", "cpu", "--engine", "both"])     # the ladder both engines load (auto widens it)
    assert exit_.value.code == 0, printed.getvalue()
    return out, Manifest.read(out), printed.getvalue()


@pytest.mark.slow
def test_tiny_pair_auto_picks_the_cheapest_that_keeps_the_gate(auto_on_tiny_pair, auto_pair):
    from eagle3_quant.validate.api import validate_draft

    out, manifest, _ = auto_on_tiny_pair
    record = manifest.auto_choice
    assert record.prediction["compute_dtype"] == "bfloat16"          # measured as vLLM serves the draft
    rows = record.candidates
    assert [r.step_bytes for r in rows] == sorted(r.step_bytes for r in rows)
    assert {r.scheme for r in rows} == {s for s in SCHEMES if not SCHEMES[s].why_not("sglang")}
    assert any(r.draft_vocab for r in rows)
    assert record.gate == "point" and record.min_acceptance_ratio == 0.99 and record.engine == "both"
    assert all(r.engines == ["vllm", "sglang"] for r in rows) and manifest.engines.serves == ["vllm", "sglang"]
    chosen = record.chosen_candidate
    assert chosen.keeps_gate and chosen.acceptance_ratio >= 0.99
    assert not any(r.keeps_gate for r in rows[:rows.index(chosen)])          # nothing cheaper kept it
    for r in rows:
        assert r.interval[0] <= r.acceptance_ratio <= r.interval[1]
        assert (r.coverage is not None) == (r.draft_vocab is not None)
    assert manifest.scheme.name == chosen.scheme
    assert (manifest.vocab_pruning or {}).get("draft_vocab") == chosen.draft_vocab
    config = json.loads((out / "config.json").read_text())
    assert config["draft_vocab_size"] == (chosen.draft_vocab or 768)
    report = validate_draft(out, reference=auto_pair.draft, calib=auto_pair.calib, target=auto_pair.target,
                            kernel=False, vllm=False, sglang=False)
    measured = report.metrics.acceptance_ratio
    assert measured == pytest.approx(chosen.acceptance_ratio, abs=1e-9)     # same simulation, same weights
    assert report.metrics.drafts == record.drafts
    if chosen.coverage is not None:
        assert manifest.vocab_pruning["coverage"] == pytest.approx(chosen.coverage)
    print("\n" + "\n".join(f"{r.name:32s} {r.step_bytes:>9,} {r.step_bytes_over_bf16:.3f} "
                           f"{r.acceptance_ratio:.4f} ({r.interval[0]:.4f}..{r.interval[1]:.4f}) "
                           f"{'' if r.coverage is None else f'{r.coverage:.4f}'} {'<- chosen' if r.chosen else ''}"
                           for r in rows))
    print(f"validate on the written artifact: acceptance ratio {measured:.6f}")


@pytest.mark.slow
def test_tiny_pair_auto_table_in_cli_and_card(auto_on_tiny_pair):
    from eagle3_quant.export.card import build_card

    out, manifest, printed = auto_on_tiny_pair
    assert "acceptance ratio (95% CI)" in printed and f"chose {manifest.auto_choice.chosen}" in printed
    card = build_card(out, "org/tiny-auto", target="org/target", base_model="org/draft").text
    chosen = manifest.auto_choice.chosen_candidate
    assert "### How this candidate was chosen" in card and "acceptance ratio (95% CI)" in card
    assert f"Chosen: **{chosen.name}**" in card
    assert all(f"| {r.name} | {r.step_bytes:,} |" in card for r in manifest.auto_choice.candidates)


@pytest.mark.slow
def test_tiny_pair_gate_no_candidate_keeps(auto_pair, auto_on_tiny_pair, tmp_path: Path, capsys):
    _, manifest, _ = auto_on_tiny_pair
    best = max(r.acceptance_ratio for r in manifest.auto_choice.candidates)
    if best >= 1.0:
        pytest.skip(f"a candidate drafts at least as well as the BF16 draft (ratio {best:.4f}): no gate in (0, 1] "
                    "refuses it")
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(auto_pair.draft), str(tmp_path / "out"), "--scheme", "auto", "--calib",
              str(auto_pair.calib), "--device", "cpu", "--min-acceptance-ratio", "1.0", "--engine", "both"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{best:.4f}" in err and "nothing written" in err
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


def auto_pipeline(tmp_path: Path, **quantize) -> Path:
    import yaml

    data = {"pipeline_version": 1, "source": "org/draft", "target": "org/target", "scheme": "auto",
            "workdir": str(tmp_path / "work"), "push": {"enabled": False},
            "calibrate": {"data": "org/chats"}, "quantize": quantize}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_pipeline_scheme_auto_reaches_quantize_options(tmp_path: Path):
    import yaml

    from eagle3_quant.errors import PipelineSpecError
    from eagle3_quant.pipeline_spec import load_pipeline, quantize_options

    spec = load_pipeline(auto_pipeline(tmp_path, min_acceptance_ratio=0.98, engine="vllm"))
    options = quantize_options(spec)
    assert (options.scheme, options.calib, options.min_acceptance_ratio, options.engine) == (
        "auto", spec.calib, 0.98, "vllm")
    with pytest.raises(PipelineSpecError, match=r"field 'quantize.min_acceptance_ratio': must be in \(0, 1\]"):
        load_pipeline(auto_pipeline(tmp_path, min_acceptance_ratio=1.5))
    path = auto_pipeline(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["calibrate"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PipelineSpecError, match="field 'calibrate.data': scheme 'auto' needs calibration data"):
        load_pipeline(path)


def test_reference_once_pairs_as_calibration_fidelity(quantized_tiny, tmp_path: Path):
    """`--scheme auto` drafts the reference once (`chain_acceptance`) and pairs it with each candidate: the
    ratio, its interval and the stats equal `calibration_fidelity`'s, which `validate` runs."""
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.runtime.acceptance import (
        acceptance_stats,
        calibration_fidelity,
        chain_acceptance,
        paired_ratio,
    )
    from eagle3_quant.runtime.loading import load_draft

    src, out = quantized_tiny()
    cal = load_calibration(write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=4))
    ref, cand = load_draft(src, "cpu", torch.float32), load_draft(out, "cpu", torch.float32)
    for draft in (ref, cand):
        draft.set_embedding(torch.randn(512, 64, generator=torch.Generator().manual_seed(1)))
    whole = calibration_fidelity(cand, ref, cal, 3)
    accepted_ref, accepted_cand = chain_acceptance(ref, cal, 3), chain_acceptance(cand, cal, 3)
    assert whole.reference.drafts > 0
    assert paired_ratio(accepted_ref, accepted_cand) == whole.ratio
    assert acceptance_stats(accepted_ref, 3) == whole.reference
    assert acceptance_stats(accepted_cand, 3) == whole.candidate
