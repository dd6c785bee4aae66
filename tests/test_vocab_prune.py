"""`quantize --draft-vocab N --calib CAL`: frequency-ranked vocabulary pruning as a pre-pass, through real Quark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from conftest import folder_hashes, load_tensors
from safetensors.torch import save_file

from eagle3_quant.cli import main
from eagle3_quant.errors import DraftFormatError, SchemeError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.vocab_prune import choose_vocab
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.manifest import Manifest
from fixtures.synthetic import DraftShape, write_synthetic_draft

VOCAB = 512
FULL_VOCAB_TINY = DraftShape(64, 160, 4, 2, 16, VOCAB, VOCAB, target_layers=8)


def test_choose_vocab_ranks_by_target_frequency_ties_by_id():
    current = torch.tensor([5, 2, 9, 7, 3])          # target id of draft ids 0..4
    counts = torch.zeros(12, dtype=torch.int64)
    counts[9], counts[5], counts[2], counts[11] = 10, 3, 3, 50   # 11 is not in the draft vocabulary
    assert choose_vocab(current, counts, 2).tolist() == [1, 2]          # targets 2 (tie with 5: lower id) and 9
    assert current[choose_vocab(current, counts, 4)].tolist() == [2, 3, 5, 9]   # zero counts: lower id first
    with pytest.raises(SchemeError, match="1..5"):
        choose_vocab(current, counts, 6)
    with pytest.raises(SchemeError, match="1..5"):
        choose_vocab(current, counts, 0)


def expected_kept(calib: Path, current: torch.Tensor, n: int) -> torch.Tensor:
    counts = torch.zeros(VOCAB, dtype=torch.int64)
    for sample in load_calibration(calib).samples():
        counts += torch.bincount(sample.target_next_ids, minlength=VOCAB)
    ranked = sorted(current.tolist(), key=lambda t: (-int(counts[t]), t))
    return torch.tensor(sorted(ranked[:n])), counts


def drop_vocab_maps(folder: Path) -> Path:
    tensors = load_tensors(folder)
    for name in ("d2t", "t2d"):
        tensors.pop(name)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config.pop("draft_vocab_size")
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("with_d2t", [True, False])
def test_quantize_prunes_vocab(tmp_path: Path, with_d2t: bool):
    if with_d2t:
        src = write_synthetic_draft(tmp_path / "src", "tiny")               # 256 of 512 tokens, with d2t
    else:
        src = drop_vocab_maps(write_synthetic_draft(tmp_path / "src", FULL_VOCAB_TINY))
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=6, seq_len=40)
    before = folder_hashes(src)
    n = 100
    result = quantize_draft(src, tmp_path / "out", device="cpu", calib=cal, draft_vocab=n)
    source, out = load_tensors(src), load_tensors(result.output)
    current = torch.arange(source["lm_head.weight"].shape[0]) + (source["d2t"] if with_d2t else 0)
    kept, counts = expected_kept(cal, current, n)
    assert (torch.arange(n) + out["d2t"]).tolist() == kept.tolist()      # offset convention, ascending ids
    assert out["t2d"].nonzero().flatten().tolist() == kept.tolist()
    rows = [current.tolist().index(t) for t in kept.tolist()]
    assert torch.equal(out["lm_head.weight"], source["lm_head.weight"][rows])
    assert json.loads((result.output / "config.json").read_text())["draft_vocab_size"] == n
    record = result.manifest.vocab_pruning
    assert record["coverage"] == pytest.approx(int(counts[kept].sum()) / int(counts.sum()))
    assert record["coverage_before"] == pytest.approx(int(counts[current].sum()) / int(counts.sum()))
    assert record["draft_vocab_before"] == current.numel() and record["draft_vocab"] == n
    assert record["ranked_tokens"] == int((counts[current] > 0).sum())
    assert result.manifest.source.path == src.name
    assert not result.manifest.source.pickle_converted
    assert {f.path for f in result.manifest.inputs} >= {"model.safetensors", "config.json"}
    assert out["midlayer.mlp.down_proj.weight"].dtype == torch.float8_e4m3fn
    assert folder_hashes(src) == before                              # the source is only read
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # the private folder is gone


def test_refusals_leave_nothing(tmp_path: Path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=2)
    with pytest.raises(SchemeError, match="--calib"):
        quantize_draft(src, tmp_path / "out", device="cpu", draft_vocab=100)
    with pytest.raises(SchemeError, match="1..256"):
        quantize_draft(src, tmp_path / "out", device="cpu", calib=cal, draft_vocab=300)
    bad = write_calibration(tmp_path / "cal-big", tmp_path / "target", samples=2, vocab=4096)
    with pytest.raises(DraftFormatError, match="another target"):
        quantize_draft(src, tmp_path / "out", device="cpu", calib=bad, draft_vocab=100)
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--quantize-lm-head"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "ParallelLMHead" in err and "vllm/model_executor/layers/quantization/quark/quark.py" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "cal-big", "src", "target"]


@pytest.mark.slow
def test_tiny_pair_pruned_to_a_third_measured_by_validate(tiny_pair, tmp_path: Path):
    """Ranked on held-out prompts 128..255, validated on the calibration set of prompts 0..127 against the
    unpruned BF16 draft: acceptance ratio with its interval, and the coverage, are reported."""
    from tiny_pair_fixtures import NEW_TOKENS, fixture_module

    from eagle3_quant.validate.api import validate_draft

    capture = fixture_module("tiny_capture")
    ranking = capture.write_calibration(
        capture.greedy_samples(tiny_pair.load_target(), tiny_pair.prompts[128:], NEW_TOKENS),
        tmp_path / "ranking", str(tiny_pair.target))
    before = json.loads((tiny_pair.draft / "config.json").read_text())["draft_vocab_size"]
    n = before // 3
    result = quantize_draft(tiny_pair.draft, tmp_path / "pruned", device="cpu", calib=ranking, draft_vocab=n)
    report = validate_draft(result.output, reference=tiny_pair.draft, calib=tiny_pair.calib,
                            target=tiny_pair.target, kernel=False)
    m, pruning = report.metrics, result.manifest.vocab_pruning
    for name in ("unchanged_parts", "config_consistency", "loader_compat", "manifest"):
        assert report.check(name).status == "passed", report.check(name).detail
    assert "vocabulary pruned to" in report.check("unchanged_parts").detail
    low, high = m.acceptance_ratio_interval
    assert low <= m.acceptance_ratio <= high and m.drafts > 1000
    assert m.kl is None                                    # null: no KL between different vocabularies
    assert 0 < pruning["coverage"] < pruning["coverage_before"] <= 1
    print(f"\ntiny pair, draft vocab {before} -> {n}: coverage {pruning['coverage']:.4f} (before "
          f"{pruning['coverage_before']:.4f}, ranked on {pruning['target_tokens']} tokens); acceptance length "
          f"BF16 {m.acceptance_length_bf16:.4f} -> pruned FP8 {m.acceptance_length_fp8:.4f}, ratio "
          f"{m.acceptance_ratio:.4f} (95% CI {low:.4f}..{high:.4f}) over {m.drafts} chains; step-0 top-1 "
          f"agreement {m.top1_agreement:.4f}")


@pytest.mark.slow
def test_cli_prunes_and_cost_reads_the_result(tmp_path: Path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=4, seq_len=40)
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--device", "cpu", "--calib", str(cal),
              "--draft-vocab", "200"])
    assert exit_.value.code == 0
    printed = " ".join(capsys.readouterr().out.split())
    ranked = Manifest.read(tmp_path / "out").vocab_pruning["ranked_tokens"]     # 4 x 40 random ids: fewer than 200
    assert "draft vocabulary 256 -> 200: covers" in printed and ranked < 200
    assert f"note: the calibration set ranks only {ranked} of the draft's tokens: the other {200 - ranked} kept " \
        "were taken by target id, not by frequency" in printed                 # said, not pruned silently
    with pytest.raises(SystemExit) as exit_:
        main(["cost", str(tmp_path / "out"), "--json"])
    cost = json.loads(capsys.readouterr().out)
    assert cost["written"]["bytes_by_part"]["lm_head"] == 200 * 64 * 2      # 200 rows of hidden 64, BF16
    assert cost["written"]["bytes_by_part"]["vocab_map"] == 200 * 8          # d2t; t2d is not read


def test_card_states_the_pruned_vocabulary(quantized_tiny, tmp_path: Path):
    import shutil

    from eagle3_quant.export.card import build_card

    _, built = quantized_tiny()
    out = tmp_path / "out"
    shutil.copytree(built, out)
    names = {"repo_id": "org/x-fp8", "target": "org/target", "base_model": "org/draft"}
    assert "draft vocabulary |" not in build_card(out, **names).text
    manifest = json.loads((out / "eagle3_quant.json").read_text())
    manifest["vocab_pruning"] = {"draft_vocab_before": 768, "draft_vocab": 256, "target_tokens": 14336,
                                 "coverage": 0.9648, "coverage_before": 0.9955}
    (out / "eagle3_quant.json").write_text(json.dumps(manifest))
    card = build_card(out, **names).text
    assert "| draft vocabulary | pruned 768 -> 256 tokens" in card and "96.48% of its 14,336" in card
    assert "--draft-vocab 256 --calib CAL" in card
