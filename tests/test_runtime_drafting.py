"""Multi-step drafting, construction from a config, training, and saving in SpecForge format."""

from __future__ import annotations

import json

import pytest
import torch
from draft_variants import write_variant

from eagle3_quant import Eagle3Draft, load_draft, new_draft_config, read_draft, save_draft
from eagle3_quant.errors import DraftFormatError, OutputExistsError
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime.drafting import draft_inputs

T, K = 9, 4


def _setup(tmp_path, variant: str = "specforge"):
    draft = load_draft(write_variant(tmp_path / variant, variant), dtype=torch.float32)
    gen = torch.Generator().manual_seed(1)
    c = draft.config
    draft.set_embedding(torch.randn(c.vocab_size, c.hidden_size, generator=gen))
    ids = torch.randint(0, c.vocab_size, (2, T), generator=gen)
    aux = torch.randn(2, T, 3 * c.target_hidden_size, generator=gen)
    return draft, ids, aux


@pytest.mark.parametrize("variant", ["specforge", "fc-norm-norm-output", "norm-before-residual"])
def test_propose_equals_repeated_full_forwards(tmp_path, variant):
    """KV-cached multi-step drafting == re-running the whole sequence (fed-back hidden states appended)."""
    draft, ids, aux = _setup(tmp_path, variant)
    proposal = draft.propose(ids, aux, K)
    assert proposal.draft_ids.shape == (2, K) and proposal.logits.shape == (2, K, draft.config.draft_vocab_size)
    with torch.no_grad():
        logits, hidden_out = draft(ids, aux)
        seq_ids, seq_hidden = ids, draft.fuse(aux)
        for j in range(K):
            assert torch.allclose(logits[:, -1], proposal.logits[:, j], atol=1e-5), j
            token = logits[:, -1].argmax(-1, keepdim=True)
            assert torch.equal(token[:, 0], proposal.draft_ids[:, j])
            seq_ids = torch.cat([seq_ids, draft.to_target_ids(token)], dim=1)
            seq_hidden = torch.cat([seq_hidden, hidden_out[:, -1:]], dim=1)
            logits, hidden_out = draft.step(seq_ids, seq_hidden)
    assert torch.equal(proposal.target_ids, draft.to_target_ids(proposal.draft_ids))


def test_propose_all_chain_equals_propose_on_the_prefix(tmp_path):
    draft, ids, aux = _setup(tmp_path, "yarn-rope")
    chains = draft.propose_all(ids, aux, K, return_logits=True)
    assert chains.draft_ids.shape == (2, T, K)
    for t in (0, 3, T - 1):
        single = draft.propose(ids[:, : t + 1], aux[:, : t + 1], K)
        assert torch.equal(chains.draft_ids[:, t], single.draft_ids), t
        assert torch.allclose(chains.logits[:, t], single.logits, atol=1e-5)


def test_draft_inputs_alignment():
    ids, targets = torch.arange(6), torch.arange(100, 106)
    aux = torch.arange(6.0)[:, None].expand(6, 3)
    d_ids, d_aux, d_targets = draft_inputs(ids, aux, targets)
    # step t reads aux[t] and token t+1, predicts what the target predicted at t+1
    assert d_ids.tolist() == [[1, 2, 3, 4, 5]] and d_aux[0, :, 0].tolist() == [0, 1, 2, 3, 4]
    assert d_targets.tolist() == [[101, 102, 103, 104, 105]]


def _tiny_config(**variant):
    return new_draft_config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
                            vocab_size=100, draft_vocab_size=48, target_hidden_size=24, aux_layer_ids=[1, 2, 3],
                            **variant)


@pytest.mark.parametrize("variant", [{}, {"fc_norm": True, "norm_output": True, "norm_before_fc": True,
                                          "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 16}}])
def test_from_config_trains_saves_and_reloads(tmp_path, variant):
    cfg = _tiny_config(**variant)
    draft = Eagle3Draft.from_config(cfg, seed=3)
    gen = torch.Generator().manual_seed(0)
    ids, aux = torch.randint(0, 100, (2, 8), generator=gen), torch.randn(2, 8, 72, generator=gen)
    labels = torch.randint(0, 48, (2, 8), generator=gen)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        logits, _ = draft(ids, aux)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert draft.fc.weight.grad is not None and draft.layer.self_attn.q_proj.weight.grad is not None

    folder = save_draft(draft, tmp_path / "saved")
    checked = read_draft(folder)                       # the foundation's strict format checks accept it
    assert checked.format is DraftFormat.SPECFORGE
    assert "midlayer.self_attn.q_proj.weight" in checked.checkpoint.tensors
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["torch_dtype"] == "float32"
    assert all(config.get(k) == v for k, v in variant.items())
    reloaded = load_draft(folder)
    with torch.no_grad():
        assert torch.equal(reloaded(ids, aux)[0], draft(ids, aux)[0])


def test_save_converts_speculators_to_specforge_and_refuses_overwrite(tmp_path):
    draft, ids, aux = _setup(tmp_path, "speculators-nbr-default")
    assert draft.spec.norm_before_residual       # speculators default when the key is absent
    emb = draft.embedding_weight
    folder = save_draft(draft, tmp_path / "converted")
    again = load_draft(folder, embedding=emb)
    assert again.spec.format is DraftFormat.SPECFORGE and again.spec.norm_before_residual
    with torch.no_grad():
        assert torch.equal(again(ids, aux)[0], draft(ids, aux)[0])
    with pytest.raises(OutputExistsError):
        save_draft(draft, folder)
    save_draft(draft, folder, force=True)


def test_save_refuses_fp8_drafts(tmp_path):
    from eagle3_quant.runtime.fp8_linear import quantize_linear

    draft = Eagle3Draft.from_config(_tiny_config())
    draft.layer.mlp.down_proj = quantize_linear(draft.layer.mlp.down_proj)
    with pytest.raises(DraftFormatError, match="FP8"):
        save_draft(draft, tmp_path / "x")
    assert not (tmp_path / "x").exists()
