"""The runtime's MLA attention in vLLM's two forms (prefill: kv_b_proj; decode: absorbed W_UK / W_UV) against
the independent float64 reference, and with the KV cache and chain drafting the decode form serves."""

from __future__ import annotations

import pytest
import torch
from draft_variants import reference_forward, write_variant

from eagle3_quant import load_draft
from eagle3_quant.runtime.mla import set_mla_form

T = 12
TOLERANCE = 1e-4
MLA_VARIANTS = ("mla", "mla-no-q-lora", "mla-deepseek-yarn", "mla-deepseek-yarn-cos-mscale")


def _inputs(draft, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    c = draft.config
    ids = torch.randint(0, c.vocab_size, (2, T), generator=gen)
    aux = torch.randn(2, T, c.num_aux * c.target_hidden_size, generator=gen)
    emb = torch.randn(c.vocab_size, c.hidden_size, generator=gen)
    return ids, aux, emb


@pytest.mark.parametrize("variant", MLA_VARIANTS)
def test_decode_form_matches_the_reference(tmp_path, variant):
    folder = write_variant(tmp_path / variant, variant)
    draft = load_draft(folder, dtype=torch.float32)
    ids, aux, emb = _inputs(draft)
    draft.set_embedding(emb)
    set_mla_form(draft, "decode")
    logits, hidden = draft(ids, aux)
    for row in range(2):
        ref_logits, ref_hidden = reference_forward(folder, ids[row], aux[row], emb)
        assert (logits[row].double() - ref_logits).abs().max().item() <= TOLERANCE
        assert (hidden[row].double() - ref_hidden).abs().max().item() <= TOLERANCE


def test_forms_agree_through_the_kv_cache_and_chains(tmp_path):
    draft = load_draft(write_variant(tmp_path / "mla", "mla"), dtype=torch.float32)
    ids, aux, emb = _inputs(draft)
    draft.set_embedding(emb)
    by_form = {}
    for form in ("prefill", "decode"):
        set_mla_form(draft, form)
        by_form[form] = (draft.propose(ids, aux, k=3), draft.propose_all(ids, aux, k=3, return_logits=True))
    (cached, chains), (cached_d, chains_d) = by_form["prefill"], by_form["decode"]
    assert torch.equal(cached.draft_ids, cached_d.draft_ids)
    assert torch.equal(chains.draft_ids, chains_d.draft_ids)
    torch.testing.assert_close(chains.logits, chains_d.logits, rtol=1e-4, atol=1e-4)


def _with_fp8_kv_b_proj(src, out):
    """A copy whose kv_b_proj alone is FP8 (per-channel weight scales, dynamic per-token inputs)."""
    import json

    from safetensors.torch import load_file, save_file

    from eagle3_quant.runtime import fp8

    tensors = load_file(src / "model.safetensors")
    name = "midlayer.self_attn.kv_b_proj"
    tensors[name + ".weight"], tensors[name + ".weight_scale"] = fp8.quantize_weight_per_channel(
        tensors[name + ".weight"].float())
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "quark", "global_quant_config": {
        "input_tensors": {"dtype": "fp8_e4m3", "is_dynamic": True}}}
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    save_file(tensors, out / "model.safetensors")
    return out


def test_decode_form_dequantizes_an_fp8_kv_b_proj(tmp_path):
    """FP8 kv_b_proj: the decode form absorbs its dequantized weight (vLLM's get_and_maybe_dequant_weights),
    the prefill form runs it as an FP8 linear (per-token FP8 inputs); they agree to that input rounding."""
    src = write_variant(tmp_path / "mla", "mla")
    fp8 = load_draft(_with_fp8_kv_b_proj(src, tmp_path / "fp8"), dtype=torch.float32)
    assert type(fp8.layer.self_attn.kv_b_proj).__name__ == "Fp8Linear"
    ids, aux, emb = _inputs(fp8)
    fp8.set_embedding(emb)
    set_mla_form(fp8, "prefill")
    prefill, _ = fp8(ids, aux)
    set_mla_form(fp8, "decode")
    decode, _ = fp8(ids, aux)
    assert 0 < (prefill - decode).abs().max() / prefill.abs().max() < 0.05
    assert (prefill.argmax(-1) == decode.argmax(-1)).float().mean() >= 0.9


def test_unknown_form_is_refused(tmp_path):
    draft = load_draft(write_variant(tmp_path / "mla", "mla"), dtype=torch.float32)
    with pytest.raises(ValueError, match="prefill, decode"):
        set_mla_form(draft, "absorbed")
