"""The tiny MLA pair: an MLA Eagle3 draft (Eagle3DeepseekV2ForCausalLM) trained for the tiny Llama target
(tests/fixtures/tiny_pair_mla/draft, made by fixtures/make_tiny_mla_draft.py). It meets the Llama draft's bars,
and its PTPC FP8 quantization (real Quark) is measured by validate (paired, ~6.6K chains): round-to-nearest keeps
0.987 of its BF16 acceptance, `--gptq` (Quark's GPTQ on other prompts) >= 0.99.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from tiny_pair_fixtures import CALIB_PROMPTS, NEW_TOKENS, PAIR, K, fixture_module
from validate_helpers import copy_artifact

from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.families import DraftFamily, MlaDims
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.runtime.loading import load_draft
from eagle3_quant.runtime.mla import MlaAttention
from eagle3_quant.runtime.saving import new_draft_config, save_draft
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.report import Gates
from eagle3_quant.validate.vllm_load import vllm_missing_reason

MLA_DRAFT = Path(__file__).resolve().parent / "fixtures" / "tiny_pair_mla" / "draft"
# What vLLM 0.33's Eagle3DeepseekV2ForCausalLM loads (draft-families.md 1.2), with q_lora_rank set
VLLM_MLA_NAMES = {f"midlayer.self_attn.{n}.weight" for n in (
    "q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")} | {
    f"midlayer.{n}.weight" for n in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                                     "hidden_norm", "post_attention_layernorm")} | {
    "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"}
TINY_MLA = MlaDims(q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)


def mla_config(**changes):
    return new_draft_config(hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=96,
                            draft_vocab_size=64, aux_layer_ids=(0, 1, 2), mla=TINY_MLA, **changes)


# ---- the runtime builds, trains and saves MLA drafts (fast) ----------------------------------------------

def test_new_mla_draft_config_is_the_class_vllm_loads():
    cfg = mla_config()
    assert cfg.family is DraftFamily.MLA and cfg.mla == TINY_MLA
    assert cfg.raw["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and cfg.raw["model_type"] == "kimi_k2"
    assert "head_dim" not in cfg.raw
    assert mla_config(mla_model_type="deepseek_v3").raw["model_type"] == "deepseek_v3"


def test_an_mla_draft_trains_with_the_rollout_and_saves_in_vllms_names(tmp_path):
    tiny_draft = fixture_module("tiny_draft")
    from eagle3_quant.runtime.model import Eagle3Draft

    draft = Eagle3Draft.from_config(mla_config(), torch.float32, seed=0, with_embedding=False)
    assert isinstance(draft.layer.self_attn, MlaAttention)
    draft.set_embedding(torch.randn(96, 32) * 0.02)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 96, (2, 12), generator=gen)
    aux = torch.randn(2, 12, 96, generator=gen)
    teacher = torch.log_softmax(torch.randn(2, 12, 64, generator=gen), dim=-1)
    loss, accuracy = tiny_draft.rollout_loss(draft, ids, aux, teacher)
    loss.backward()
    trainable = [(n, p) for n, p in draft.named_parameters() if p.requires_grad]
    assert len(accuracy) == tiny_draft.ROLLOUT_STEPS and math.isfinite(loss.item())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for _, p in trainable)

    save_draft(draft, tmp_path / "draft")
    names = set(load_file(tmp_path / "draft" / "model.safetensors"))
    assert names == VLLM_MLA_NAMES
    loaded = load_draft(tmp_path / "draft", dtype=torch.float32, embedding=draft.embedding_weight)
    with torch.no_grad():
        expected, _ = draft(ids[:, 1:], aux[:, :-1])
        got, _ = loaded(ids[:, 1:], aux[:, :-1])
    torch.testing.assert_close(got, expected)


# ---- the committed tiny MLA draft (slow: quantizes with Quark and measures acceptance) -----------------------

def test_the_committed_mla_draft_is_small_bf16_and_shares_the_llama_drafts_vocabulary_and_taps():
    draft = read_draft(MLA_DRAFT)          # the shapes checked against the MLA dims
    cfg = draft.config
    assert draft.format is DraftFormat.SPECFORGE
    llama = json.loads((PAIR / "draft" / "config.json").read_text())
    assert cfg.family is DraftFamily.MLA and cfg.raw["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert cfg.mla == MlaDims(q_lora_rank=64, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                              v_head_dim=32) and cfg.num_attention_heads == 4
    assert cfg.raw["eagle_config"] == llama["eagle_config"]
    size = sum(f.stat().st_size for f in MLA_DRAFT.iterdir())
    assert size < 2e6
    with safe_open(str(MLA_DRAFT / "model.safetensors"), framework="pt") as fh:
        assert set(fh.keys()) == VLLM_MLA_NAMES
        assert {fh.get_slice(n).get_dtype() for n in fh.keys() if n.endswith(".weight")} == {"BF16"}
        mla, ref = {n: fh.get_tensor(n) for n in ("d2t", "t2d")}, load_file(PAIR / "draft" / "model.safetensors")
    assert torch.equal(mla["d2t"], ref["d2t"]) and torch.equal(mla["t2d"], ref["t2d"])


@pytest.fixture(scope="module")
def mla_fp8(tmp_path_factory) -> Path:
    from eagle3_quant.quantize.api import quantize_draft

    return quantize_draft(MLA_DRAFT, tmp_path_factory.mktemp("mla") / "fp8", device="cpu").output


@pytest.fixture(scope="module")
def report(tiny_pair, mla_fp8, tmp_path_factory):
    out = copy_artifact(mla_fp8, tmp_path_factory.mktemp("mla-validated") / "fp8")
    return validate_draft(out, reference=MLA_DRAFT, calib=tiny_pair.calib, gates=Gates())


@pytest.mark.slow
def test_the_bf16_mla_draft_meets_the_bars(tiny_pair, report):
    """acceptance length >= 2.0 at k=3, and >= the bigram-table drafter + 0.5 on the same chains."""
    make = fixture_module("make_tiny_pair")
    corpus = fixture_module("tiny_corpus")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(PAIR / "target" / "tokenizer.json"))
    table = make.bigram_table(corpus.encode_stream(tokenizer, corpus.read_texts(corpus.Corpus.stdlib().train_files)),
                              corpus.VOCAB_SIZE)
    samples = list(load_calibration(tiny_pair.calib).samples())
    bigram = make.acceptance(samples, lambda s: make.bigram_proposals(table, s.input_ids, K), K)
    m = report.metrics
    print(f"\ntiny MLA pair: BF16 acceptance length {m.acceptance_length_bf16:.3f}, bigram "
          f"{bigram.acceptance_length:.3f}, over {m.drafts} chains")
    assert m.k == K and m.drafts == bigram.drafts >= 6000
    assert m.acceptance_length_bf16 >= make.MIN_ACCEPTANCE
    assert m.acceptance_length_bf16 >= bigram.acceptance_length + make.MIN_MARGIN


@pytest.mark.slow
def test_fp8_mla_draft_acceptance_is_measured_with_its_interval(report, mla_fp8):
    """Measured (docs/families.md, fp32 prediction): ratio 0.9872, 95% CI 0.9808..0.9937, top-1 0.9483 over 6590
    chains; in vLLM's serving numerics (bf16, what validate computes) about 0.992 (0.985..0.998), top-1 0.947; the
    Llama draft keeps 1.0017. validate's gates judge it: the fidelity gates a value misses fail (top-1 at least),
    every other check passes."""
    m = report.metrics
    print(f"\ntiny MLA pair: acceptance length BF16 {m.acceptance_length_bf16:.4f}, FP8 "
          f"{m.acceptance_length_fp8:.4f}, ratio {m.acceptance_ratio:.4f} "
          f"[{m.acceptance_ratio_interval[0]:.4f}, {m.acceptance_ratio_interval[1]:.4f}], "
          f"top-1 {m.top1_agreement:.4f}, kl {m.kl:.5f}, {m.drafts} chains")
    assert report.calibration["samples"] == CALIB_PROMPTS and m.k == K and m.drafts >= 6000
    assert m.acceptance_length_bf16 >= 2.0 and m.acceptance_ratio >= 0.98
    low, high = m.acceptance_ratio_interval
    assert low <= m.acceptance_ratio <= high and high - low <= 0.02     # resolves 1%
    assert 0 <= m.kl < 0.01
    status = {c.name: c.status for c in report.checks}
    assert status["acceptance_ratio"] == ("passed" if m.acceptance_ratio >= 0.99 else "failed")
    assert status["top1_agreement"] == ("passed" if m.top1_agreement >= 0.95 else "failed")
    assert {c.name for c in report.failed_checks} <= {"acceptance_ratio", "top1_agreement"}
    # vLLM 0.33's own MLA Eagle3 class loads and runs it (model_type kimi_k2; deepseek_v3 becomes an MTP draft)
    assert status["vllm_load"] == ("skipped" if vllm_missing_reason() else "passed"), report.check("vllm_load").detail
    with safe_open(str(next(mla_fp8.glob("*.safetensors"))), framework="pt") as fh:
        dtypes = {n.removesuffix(".weight"): fh.get_slice(n).get_dtype() for n in fh.keys() if n.endswith(".weight")}
    attn = "midlayer.self_attn."
    assert {dtypes[attn + n] for n in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj")} == {"F8_E4M3"}
    assert dtypes[attn + "kv_b_proj"] == dtypes["fc"] == dtypes["lm_head"] == "BF16"    # the MLA defaults


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="round-to-nearest PTPC FP8 does not pass validate on the tiny MLA draft: "
                   "in vLLM's serving numerics (bf16) ratio about 0.992 (95% CI 0.985..0.998) and top-1 about 0.947, "
                   "under the 0.95 gate (fp32: 0.9872, 0.9808..0.9937; 0.9845 over 53K held-out chains); --gptq "
                   "keeps >= 0.99 with the same plan and bytes (test below, docs/families.md)")
def test_fp8_mla_draft_keeps_99_percent_of_the_bf16_acceptance(report):
    assert report.metrics.acceptance_ratio >= 0.99 and report.passed


@pytest.mark.slow
def test_fp8_mla_draft_with_gptq_keeps_99_percent_of_the_bf16_acceptance(tiny_pair, holdout_calib, mla_fp8,
                                                                          tmp_path):
    """The default plan (all five groups FP8, the same bytes) with `--gptq`, its Hessians taken on the other 128
    held-out prompts and judged on the test set: measured ratio 0.9994 (95% CI 0.9947..1.0041), top-1 0.9602;
    over 53K chains of 1024 other held-out prompts 0.9958 (0.9941..0.9975), against 0.9845 without GPTQ."""
    from eagle3_quant.quantize.api import quantize_draft

    result = quantize_draft(MLA_DRAFT, tmp_path / "fp8", device="cpu", calib=holdout_calib, gptq=True)
    assert [d.module for d in result.manifest.layers if d.quantized] == \
        [d.module for d in Manifest.read(mla_fp8).layers if d.quantized]          # the default plan, unchanged
    checked = validate_draft(result.output, reference=MLA_DRAFT, calib=tiny_pair.calib, gates=Gates())
    m = checked.metrics
    print(f"\ntiny MLA pair, --gptq: ratio {m.acceptance_ratio:.4f} "
          f"[{m.acceptance_ratio_interval[0]:.4f}, {m.acceptance_ratio_interval[1]:.4f}], "
          f"top-1 {m.top1_agreement:.4f}, kl {m.kl:.5f}")
    assert checked.passed, [(c.name, c.detail) for c in checked.failed_checks]
    assert m.acceptance_ratio >= 0.99 and m.top1_agreement >= 0.95 and m.drafts >= 6000
    low, high = m.acceptance_ratio_interval
    assert low <= m.acceptance_ratio <= high and high - low <= 0.02
    status = {c.name: c.status for c in checked.checks}
    assert status["vllm_load"] == ("skipped" if vllm_missing_reason() else "passed"), checked.check("vllm_load").detail


@pytest.mark.slow
@pytest.mark.parametrize("which", ["bf16", "fp8"])
def test_speculative_decoding_with_the_mla_draft_reproduces_the_target_greedy_text(tiny_pair, mla_fp8, which):
    capture = fixture_module("tiny_capture")
    target = tiny_pair.load_target()
    draft = load_draft(MLA_DRAFT if which == "bf16" else mla_fp8, dtype=torch.float32, embedding=tiny_pair.target)
    drafts = accepted = 0
    for prompt in tiny_pair.prompts[-4:]:              # prompts the calibration set does not use
        ids, d, a = capture.speculative_decode(target, draft, prompt, NEW_TOKENS, K)
        assert torch.equal(ids, capture.greedy_generate(target, prompt[None], NEW_TOKENS)[0])
        drafts, accepted = drafts + d, accepted + a
    assert 1 + accepted / drafts > 1.8


@pytest.mark.slow
def test_fp8_mla_draft_with_its_mlp_gate_up_in_bf16_keeps_99_percent(tiny_pair, tmp_path):
    """`--exclude gate_up_proj`, the FP8 group `sensitivity` ranks first: measured ratio 0.9928 (95% CI
    0.9872..0.9982), top-1 0.9629; validate passes it with the default gates."""
    from eagle3_quant.quantize.api import quantize_draft

    out = quantize_draft(MLA_DRAFT, tmp_path / "fp8", device="cpu", exclude=("gate_up_proj",)).output
    checked = validate_draft(out, reference=MLA_DRAFT, calib=tiny_pair.calib, gates=Gates(), kernel=False)
    m = checked.metrics
    print(f"\ntiny MLA pair, gate_up_proj BF16: ratio {m.acceptance_ratio:.4f} "
          f"[{m.acceptance_ratio_interval[0]:.4f}, {m.acceptance_ratio_interval[1]:.4f}], "
          f"top-1 {m.top1_agreement:.4f}")
    assert checked.passed, [(c.name, c.detail) for c in checked.failed_checks]
    assert m.acceptance_ratio >= 0.99 and m.drafts >= 6000
    low, high = m.acceptance_ratio_interval
    assert low <= m.acceptance_ratio <= high and high - low <= 0.02


@pytest.mark.slow
def test_smoothed_mla_draft_is_validated_against_the_unsmoothed_draft(tiny_pair, report, tmp_path):
    """`--smooth-alpha 0.5` (benchmarks/studies/mla_fp8_remedies.py): measured ratio 0.9907 (95% CI 0.9850..0.9963),
    top-1 0.9507 with the fp32 prediction; about 0.997 in vLLM's serving numerics (bf16, what validate computes now),
    its interval overlapping the default plan's: activations have no outlier channels to migrate
    (docs/families.md). validate judges it against the unsmoothed BF16 draft: folded BF16 tensors and FP8
    weights are left out of the byte and SQNR comparisons, everything else is checked as usual."""
    from eagle3_quant.quantize.api import quantize_draft

    result = quantize_draft(MLA_DRAFT, tmp_path / "fp8", device="cpu", calib=tiny_pair.calib, smooth_alpha=0.5)
    smoothing = result.manifest.smoothing
    assert smoothing["alpha"] == 0.5 and smoothing["positions"] > 0
    assert "midlayer.post_attention_layernorm.weight" in smoothing["folded_tensors"] or \
        "midlayer.mlp.up_proj.weight" in smoothing["folded_tensors"]
    checked = validate_draft(result.output, reference=MLA_DRAFT, calib=tiny_pair.calib, gates=Gates(), kernel=False)
    status = {c.name: c.status for c in checked.checks}
    assert status["unchanged_parts"] == "passed" and status["weight_sqnr"] in ("passed", "skipped")
    m, default = checked.metrics, report.metrics
    low, high = m.acceptance_ratio_interval
    default_low, default_high = default.acceptance_ratio_interval
    print(f"\ntiny MLA pair, --smooth-alpha 0.5: ratio {m.acceptance_ratio:.4f} [{low:.4f}, {high:.4f}], "
          f"top-1 {m.top1_agreement:.4f}; default plan {default.acceptance_ratio:.4f} "
          f"[{default_low:.4f}, {default_high:.4f}]")
    assert m.drafts == default.drafts >= 6000
    assert low <= m.acceptance_ratio <= high and high - low <= 0.02
    # The claim, not one machine's digits (bf16 sums differ in the 4th decimal from one CPU or thread count to the
    # next): the smoothed draft keeps the acceptance gate, and its 95% interval overlaps the default plan's on the
    # same chains (smoothing moves nothing these chains resolve). Its point sits near the default plan's upper end
    # (0.997 against 0.992 [0.985, 0.998] measured), too near for "inside the other's interval" on every machine.
    assert m.acceptance_ratio >= checked.gates.min_acceptance_ratio and status["acceptance_ratio"] == "passed"
    assert low <= default_high and default_low <= high
