"""Validation on the tiny real pair: FP8 keeps the acceptance (paired, ~6.7K chains), broken FP8 drafts fail,
speculative decoding with the pair reproduces the target's greedy text exactly."""

from __future__ import annotations

import pytest
import torch
from tiny_pair_fixtures import CALIB_PROMPTS, NEW_TOKENS, K, fixture_module
from validate_helpers import copy_artifact, noise_in_weight, plain_quark_exclude, scale_times_8

from eagle3_quant.cli import main
from eagle3_quant.runtime.loading import load_draft
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.report import Gates
from eagle3_quant.validate.vllm_load import vllm_missing_reason

pytestmark = pytest.mark.slow
BROKEN_SAMPLES = 48
# The tiny draft's logits are often near ties: the same BF16 draft computed in fp32 and in bf16 agrees on only
# ~98.8% of top-1 tokens, FP8 on ~96.5% while keeping 100% of the acceptance length: the default gates pass it.
GATES = Gates()
VLLM = {"vllm_load"} if vllm_missing_reason() is None else set()   # vLLM's own code judges too


@pytest.fixture(scope="module")
def report(tiny_pair, tmp_path_factory):
    out = copy_artifact(tiny_pair.fp8, tmp_path_factory.mktemp("validated") / "fp8")
    return validate_draft(out, reference=tiny_pair.draft, calib=tiny_pair.calib, gates=GATES)


def test_fp8_keeps_the_acceptance_of_the_bf16_draft(report):
    m = report.metrics
    assert report.passed, [(c.name, c.detail) for c in report.failed_checks]
    assert m.k == K and m.drafts >= 6000
    assert m.acceptance_length_bf16 >= 2.0                       # the fixture's own bar
    assert m.acceptance_ratio >= 0.99
    low, high = m.acceptance_ratio_interval
    assert low <= m.acceptance_ratio <= high and high - low <= 0.02     # resolves 1%
    assert report.gates.min_top1_agreement == 0.95 and report.gate_source["min_top1_agreement"] == "default for " \
                                                                                                 "ptpc_fp8"
    assert m.top1_agreement >= report.gates.min_top1_agreement and 0 <= m.kl < 0.01
    for key in ("per_position_acceptance_bf16", "per_position_acceptance_fp8"):
        rates = getattr(m, key)
        assert len(rates) == K and all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    assert abs(m.acceptance_length_bf16 - 1 - sum(m.per_position_acceptance_bf16)) < 1e-9
    assert report.calibration["samples"] == CALIB_PROMPTS
    assert m.compute_dtype == "bfloat16" and m.prediction.engine == "vllm"   # vLLM's serving numerics
    walk = m.engine_walk                          # the chains vLLM's engine drafts on the same continuations
    assert 0 < walk.drafts_bf16 < m.drafts and 0 < walk.drafts_fp8 < m.drafts
    walk_low, walk_high = walk.acceptance_ratio_interval
    assert walk_low <= walk.acceptance_ratio <= walk_high
    assert abs(walk.acceptance_length_fp8 - 1 - sum(walk.per_position_acceptance_fp8)) < 1e-9
    assert {c.name: c.status for c in report.checks}["acceptance_ratio"] == "passed"


@pytest.mark.parametrize(("breakage", "failing"), [
    (lambda out: scale_times_8(out, "midlayer.mlp.down_proj"), {"weight_sqnr", "top1_agreement", "acceptance_ratio"}),
    (lambda out: noise_in_weight(out, "midlayer.self_attn.o_proj", relative=0.5), {"weight_sqnr", "top1_agreement"}),
    (plain_quark_exclude, {"loader_compat", *VLLM}),
], ids=["scale_x8", "noise", "plain_quark_exclude"])
def test_broken_quantizations_fail(tiny_pair, tmp_path, breakage, failing):
    out = copy_artifact(tiny_pair.fp8, tmp_path / "fp8")
    breakage(out)
    broken = validate_draft(out, reference=tiny_pair.draft, calib=tiny_pair.calib, gates=GATES, kernel=False,
                            max_samples=BROKEN_SAMPLES, sglang=False)
    assert not broken.passed
    assert failing <= {c.name for c in broken.failed_checks} <= failing | {"manifest", "acceptance_ratio"}


def test_validate_cli_on_the_pair(tiny_pair, tmp_path, capsys):
    out = copy_artifact(tiny_pair.fp8, tmp_path / "fp8")
    with pytest.raises(SystemExit) as exit_info:
        main(["validate", str(out), "--reference", str(tiny_pair.draft), "--calib", str(tiny_pair.calib),
              "--max-samples", "16", "--min-top1", "0.95", "--min-acceptance-ratio", "0.98"])
    printed = capsys.readouterr().out
    assert exit_info.value.code == 0, printed
    assert "acceptance length" in printed and "PASSED" in printed


@pytest.mark.parametrize("which", ["bf16", "fp8"])
def test_speculative_decoding_reproduces_the_target_greedy_text(tiny_pair, which):
    capture = fixture_module("tiny_capture")
    target = tiny_pair.load_target()
    # fp32 compute (CPU bf16 matmuls are slow); whatever the draft proposes, the target's verification decides
    draft = load_draft(tiny_pair.draft if which == "bf16" else tiny_pair.fp8, dtype=torch.float32,
                       embedding=tiny_pair.target)
    drafts = accepted = 0
    for prompt in tiny_pair.prompts[-4:]:              # prompts the calibration set does not use
        ids, d, a = capture.speculative_decode(target, draft, prompt, NEW_TOKENS, K)
        assert torch.equal(ids, capture.greedy_generate(target, prompt[None], NEW_TOKENS)[0])
        drafts, accepted = drafts + d, accepted + a
    assert 1 + accepted / drafts > 1.8                 # the draft really drafts: most steps accept tokens
