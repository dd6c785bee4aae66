"""`estimate`: tokens per cycle from measured acceptance, the cycle model, the seed's 8K/1K verify shares, the card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hub_server.fixtures import bound

from eagle3_quant.cli import main
from eagle3_quant.cost import checkpoint_cost, get_device_profile
from eagle3_quant.errors import EstimateInputError
from eagle3_quant.speedup import (
    ESTIMATE_NAME,
    ReportAcceptance,
    estimate_draft,
    estimate_speedup,
    read_report_acceptance,
    tokens_per_round,
)

SEED_DRAFT_MS = 1.8        # the seed's fixed draft-side cost per cycle (eagle3-facts.md section 12)
FP8_RATES = [0.80, 0.60, 0.45]
BF16_RATES = [0.81, 0.61, 0.46]


def report(folder: Path, *, fp8=FP8_RATES, bf16=BF16_RATES, timing: dict | None = None) -> Path:
    """A validation.json with the fields `validate` writes (validate/report.py)."""
    data = {"report_version": 1, "passed": True, "checks": [],
            "metrics": {"per_position_acceptance_fp8": fp8, "per_position_acceptance_bf16": bf16,
                        "acceptance_length_fp8": 1 + sum(fp8), "k": len(fp8), "drafts": 6000},
            "kernel": {"status": "passed", "device": "AMD Instinct MI355X", "timing": timing}}
    path = folder / "validation.json"
    path.write_text(json.dumps(bound(data, folder) if (folder / "eagle3_quant.json").is_file() else data))
    return path


def test_tokens_per_round_is_one_plus_cumulative_rates():
    # conditional rates 0.8, 0.75, 0.75 -> products 0.8, 0.6, 0.45 (what the report stores)
    assert tokens_per_round(FP8_RATES, 3) == pytest.approx(1 + 0.8 + 0.8 * 0.75 + 0.8 * 0.75 * 0.75)
    assert tokens_per_round(FP8_RATES, 1) == pytest.approx(1.8)
    with pytest.raises(EstimateInputError, match="measured for 3 positions"):
        tokens_per_round(FP8_RATES, 4)


@pytest.mark.parametrize(("verify_ms", "share"), [(0.30, 0.14), (2.56, 0.59)])
def test_seed_8k_1k_verify_share(verify_ms: float, share: float):
    """The seed's analysis: a fixed ~1.8 ms draft side; verify 0.30 ms at 1K input -> 14%, 2.56 ms at 8K -> 59%."""
    est = estimate_speedup(ReportAcceptance(tuple(FP8_RATES), None, 6000), verify_ms, draft_ms=SEED_DRAFT_MS)
    assert round(est.verify_share, 2) == share
    assert est.cycle_ms == pytest.approx(verify_ms + SEED_DRAFT_MS)
    assert est.speedup_vs_no_spec == pytest.approx(2.85 * verify_ms / (verify_ms + SEED_DRAFT_MS))
    assert est.speedup_vs_bf16_draft is None      # no BF16 acceptance, no floors: not invented


def test_floor_and_bf16_comparison_on_real_quark_output(quantized_tiny, tmp_path: Path):
    _, out = quantized_tiny()
    acceptance = read_report_acceptance(report(tmp_path))
    cost, mi355x = checkpoint_cost(out), get_device_profile("mi355x")
    est = estimate_speedup(acceptance, 10.0, cost=cost, profile=mi355x)
    assert est.draft_ms == pytest.approx(cost.written.floor_ms(mi355x, 3))
    assert est.draft_ms_bf16 == pytest.approx(cost.bf16.floor_ms(mi355x, 3))
    assert "lower bound" in est.draft_ms_source
    fp8_rate = 2.85 / (10.0 + est.draft_ms)
    bf16_rate = (1 + sum(BF16_RATES)) / (10.0 + est.draft_ms_bf16)
    assert est.speedup_vs_bf16_draft == pytest.approx(fp8_rate / bf16_rate)
    given = estimate_speedup(acceptance, 10.0, draft_ms=2.0, cost=cost, profile=mi355x)
    assert given.draft_ms_bf16 == pytest.approx(2.0 + est.draft_ms_bf16 - est.draft_ms)


def test_measured_kernel_timings_are_used(quantized_tiny, tmp_path: Path):
    _, out = quantized_tiny()
    timing = {"batch_sizes": [1, 16], "total_fp8_ms": [0.05, 0.09], "total_bf16_ms": [0.07, 0.12]}
    acceptance = read_report_acceptance(report(tmp_path, timing=timing))
    assert (acceptance.layer_ms, acceptance.layer_ms_bf16) == (0.05, 0.07)
    cost, profile = checkpoint_cost(out), get_device_profile("mi355x")
    est = estimate_speedup(acceptance, 10.0, cost=cost, profile=profile)
    rest = est.draft_ms - 3 * 0.05
    assert 0 < rest < cost.written.floor_ms(profile, 3)
    assert est.draft_ms_bf16 == pytest.approx(3 * 0.07 + rest)
    assert "measured" in est.draft_ms_source


def test_bad_inputs(tmp_path: Path):
    with pytest.raises(EstimateInputError, match="no such file"):
        read_report_acceptance(tmp_path / "missing.json")
    (tmp_path / "v.json").write_text(json.dumps({"metrics": {"top1_agreement": 0.99}}))
    with pytest.raises(EstimateInputError, match="per_position_acceptance_fp8"):
        read_report_acceptance(tmp_path / "v.json")
    acceptance = ReportAcceptance(tuple(FP8_RATES), None, 10)
    with pytest.raises(EstimateInputError, match="verify_ms"):
        estimate_speedup(acceptance, 0.0, draft_ms=1.0)
    with pytest.raises(EstimateInputError, match="device profile"):
        estimate_speedup(acceptance, 1.0)


def test_cli_writes_estimate_and_card_shows_it(quantized_tiny, tmp_path: Path, capsys):
    from eagle3_quant.export.card import build_card

    _, built = quantized_tiny()
    out = tmp_path / "out"
    shutil.copytree(built, out)
    names = {"repo_id": "org/x-fp8", "target": "org/target", "base_model": "org/draft"}
    card = build_card(out, **names).text
    assert "speedup estimate | not measured (run `eagle3-quant estimate OUT --verify-ms X --write`)" in card
    report(out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", str(out), "--verify-ms", "2.56", "--draft-ms", "1.8"])
    assert exit_.value.code == 0 and "ESTIMATE" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == before       # printed only: written when asked
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", str(out), "--verify-ms", "2.56", "--draft-ms", "1.8", "--write"])
    assert exit_.value.code == 0 and f"wrote {out / ESTIMATE_NAME}" in capsys.readouterr().out
    data = json.loads((out / ESTIMATE_NAME).read_text())
    assert round(data["verify_share"], 2) == 0.59 and data["kind"].startswith("estimate")
    assert data["artifact_files"] == json.loads((out / "validation.json").read_text())["artifact_files"]
    card = build_card(out, **names).text
    assert "speedup over no speculation (ESTIMATE) | 1.67x" in card    # 2.85 * 2.56 / 4.36
    assert "2.560 ms, given (`--verify-ms`)" in card and "1.800 ms, given (--draft-ms)" in card
    assert "2.850, from validation.json: 6000 chains, per-position 0.800, 0.600, 0.450" in card
    assert "| inputs: validation report | `validation.json` of this repository, sha256 `" in card
    report(out, fp8=[0.8, 0.6, 0.4])             # validated again: the estimate is of the report before
    assert "| speedup estimate | not measured (speedup_estimate.json was made from another validation report" \
        in build_card(out, **names).text
    with pytest.raises(SystemExit) as exit_:
        main(["estimate", str(out), "--verify-ms", "-1"])
    assert exit_.value.code == 2
    assert estimate_draft(out, 1.0, k=2, write=False).k == 2


def test_bf16_side_comes_from_the_reports_reference(quantized_tiny, tmp_path: Path):
    """A pruned draft is compared with its unpruned reference: the BF16 draft time uses the reference's bytes."""
    from fixtures.synthetic import DraftShape, write_synthetic_draft

    _, built = quantized_tiny()
    out = tmp_path / "out"
    shutil.copytree(built, out)
    reference = write_synthetic_draft(tmp_path / "ref", DraftShape(64, 160, 4, 2, 16, 512, 512, target_layers=8))
    data = json.loads(report(out).read_text())
    (out / "validation.json").write_text(json.dumps({**data, "reference": str(reference)}))
    est = estimate_draft(out, 5.0, write=False)
    mi355x = get_device_profile("mi355x")
    assert est.draft_ms_bf16 == pytest.approx(checkpoint_cost(reference).bf16.floor_ms(mi355x, 3))
    assert est.draft_ms == pytest.approx(checkpoint_cost(out).written.floor_ms(mi355x, 3))
    assert est.draft_ms_bf16 > checkpoint_cost(out).bf16.floor_ms(mi355x, 3)   # the larger head is counted
