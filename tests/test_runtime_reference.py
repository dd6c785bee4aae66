"""The runtime against an independent float64 reference, for every architecture variant."""

from __future__ import annotations

import math

import pytest
import torch
from draft_variants import VARIANTS, reference_forward, write_variant

from eagle3_quant import load_draft

T = 12
TOLERANCE = 1e-4


def _inputs(draft, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    c = draft.config
    ids = torch.randint(0, c.vocab_size, (2, T), generator=gen)
    aux = torch.randn(2, T, c.num_aux * c.target_hidden_size, generator=gen)
    emb = torch.randn(c.vocab_size, c.hidden_size, generator=gen)
    return ids, aux, emb


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_runtime_matches_reference(tmp_path, variant):
    folder = write_variant(tmp_path / variant, variant)
    probe = load_draft(folder, dtype=torch.float32)
    ids, aux, emb = _inputs(probe)
    embedding = None if probe.embedding_weight is not None else emb
    draft = load_draft(folder, dtype=torch.float32, embedding=embedding)
    logits, hidden = draft(ids, aux)
    assert logits.shape == (2, T, draft.config.draft_vocab_size) and logits.dtype == torch.float32
    for row in range(2):
        ref_logits, ref_hidden = reference_forward(folder, ids[row], aux[row], embedding)
        assert (logits[row].double() - ref_logits).abs().max().item() <= TOLERANCE
        assert (hidden[row].double() - ref_hidden).abs().max().item() <= TOLERANCE


def test_variants_really_differ(tmp_path):
    """Each variant flag changes the output, so the reference comparison above tests it."""
    base = load_draft(write_variant(tmp_path / "a", "specforge"), dtype=torch.float32)
    ids, aux, emb = _inputs(base)
    base.set_embedding(emb)
    reference, _ = base(ids, aux)
    for variant in ("llama3-rope", "linear-rope", "norm-before-residual", "norm-before-fc", "attention-bias",
                    "qwen3", "mla-deepseek-yarn"):
        other = load_draft(write_variant(tmp_path / variant, variant), dtype=torch.float32, embedding=emb)
        logits, _ = other(ids, aux)
        assert (logits - reference).abs().max() > 1e-3, variant


def test_position_ids_default_to_arange_and_only_relative_positions_matter(tmp_path):
    draft = load_draft(write_variant(tmp_path / "d", "specforge"), dtype=torch.float32)
    ids, aux, emb = _inputs(draft)
    draft.set_embedding(emb)
    positions = torch.arange(T).expand(2, T)
    default, _ = draft(ids, aux)
    assert torch.equal(default, draft(ids, aux, positions)[0])
    assert (default - draft(ids, aux, positions + 5)[0]).abs().max() < 1e-4    # RoPE is relative
    assert (default - draft(ids, aux, positions * 2)[0]).abs().max() > 1e-2


def test_bf16_runtime_close_to_fp32(tmp_path):
    folder = write_variant(tmp_path / "d", "specforge")
    fp32 = load_draft(folder, dtype=torch.float32)
    ids, aux, emb = _inputs(fp32)
    bf16 = load_draft(folder, embedding=emb)
    fp32.set_embedding(emb)
    assert bf16.dtype == torch.bfloat16 and bf16.fc.weight.dtype == torch.bfloat16
    a, _ = fp32(ids, aux)
    b, _ = bf16(ids, aux)
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    assert agree > 0.9


def test_mla_rope_variants_really_differ(tmp_path):
    """DeepSeek YaRN (frequencies, cos/sin mscale, softmax mscale) changes the MLA output: the reference
    comparison above covers each part."""
    base = load_draft(write_variant(tmp_path / "mla", "mla"), dtype=torch.float32)
    ids, aux, emb = _inputs(base)
    base.set_embedding(emb)
    reference, _ = base(ids, aux)
    for variant in ("mla-deepseek-yarn", "mla-deepseek-yarn-cos-mscale"):
        other = load_draft(write_variant(tmp_path / variant, variant), dtype=torch.float32, embedding=emb)
        assert (other(ids, aux)[0] - reference).abs().max() > 1e-3, variant
    assert base.spec.rope.softmax_scale_factor() == 1.0
    yarn = load_draft(write_variant(tmp_path / "y", "mla-deepseek-yarn"), dtype=torch.float32)
    assert yarn.spec.rope.softmax_scale_factor() == pytest.approx((0.1 * math.log(4.0) + 1) ** 2)
