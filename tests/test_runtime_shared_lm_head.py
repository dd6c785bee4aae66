"""A draft without lm_head.weight runs on the target's lm_head, as vLLM serves it (has_own_lm_head False: the
proposer swaps in the target's), against the independent float64 reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from draft_variants import reference_forward, write_variant
from safetensors.torch import load_file, save_file

from eagle3_quant import load_draft
from eagle3_quant.errors import DraftFormatError
from fixtures.synthetic import write_synthetic_draft

T = 12
TOLERANCE = 1e-4


def without_lm_head(folder: Path) -> Path:
    """The draft as one sharing its target's lm_head: no lm_head.weight, full vocab (no d2t/t2d)."""
    tensors = load_file(folder / "model.safetensors")
    for name in ("lm_head.weight", "d2t", "t2d"):
        tensors.pop(name, None)
    save_file(tensors, folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    layer = config.get("transformer_layer_config", config)
    config["draft_vocab_size"] = layer["draft_vocab_size"] = layer["vocab_size"]
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def shared_drafts(root: Path) -> dict[str, Path]:
    return {"minimax-m3": write_synthetic_draft(root / "m3", "tiny-minimax-m3"),
            "mla": without_lm_head(write_variant(root / "mla", "mla")),
            "mla-no-q-lora": without_lm_head(write_variant(root / "mla-nq", "mla-no-q-lora"))}


def _inputs(config, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (2, T), generator=gen)
    aux = torch.randn(2, T, config.num_aux * config.target_hidden_size, generator=gen)
    emb = torch.randn(config.vocab_size, config.hidden_size, generator=gen)
    head = torch.randn(config.vocab_size, config.hidden_size, generator=gen) * 0.1
    return ids, aux, emb, head


def write_target(folder: Path, tensors: dict[str, torch.Tensor], tied: bool = False) -> Path:
    folder.mkdir(parents=True)
    save_file({n: t.contiguous() for n, t in tensors.items()}, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"tie_word_embeddings": tied}))
    return folder


@pytest.mark.parametrize("name", ["minimax-m3", "mla", "mla-no-q-lora"])
def test_shared_lm_head_matches_the_reference(tmp_path, name):
    folder = shared_drafts(tmp_path)[name]
    from eagle3_quant.reading.draft import read_draft

    config = read_draft(folder).config
    ids, aux, emb, head = _inputs(config)
    draft = load_draft(folder, dtype=torch.float32, embedding=emb, lm_head=head)
    logits, hidden = draft(ids, aux)
    assert logits.shape == (2, T, config.vocab_size)
    for row in range(2):
        ref_logits, ref_hidden = reference_forward(folder, ids[row], aux[row], emb, head)
        assert (logits[row].double() - ref_logits).abs().max().item() <= TOLERANCE
        assert (hidden[row].double() - ref_hidden).abs().max().item() <= TOLERANCE
    other, _ = load_draft(folder, dtype=torch.float32, embedding=emb, lm_head=head * 2)(ids, aux)
    assert torch.allclose(other, 2 * logits, atol=1e-4)          # the logits really come from the given head


def test_lm_head_read_from_the_target_folder(tmp_path):
    folder = write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3")
    from eagle3_quant.reading.draft import read_draft

    ids, aux, emb, head = _inputs(read_draft(folder).config)
    expected, _ = load_draft(folder, dtype=torch.float32, embedding=emb, lm_head=head)(ids, aux)
    target = write_target(tmp_path / "target", {"model.embed_tokens.weight": emb, "lm_head.weight": head})
    got, _ = load_draft(folder, dtype=torch.float32, embedding=target, lm_head=target)(ids, aux)
    assert torch.equal(got, expected)
    tied = write_target(tmp_path / "tied", {"model.embed_tokens.weight": head}, tied=True)
    got, _ = load_draft(folder, dtype=torch.float32, embedding=emb, lm_head=tied)(ids, aux)
    assert torch.equal(got, expected)


def test_bad_shared_lm_heads_are_named(tmp_path):
    folder = write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3")
    untied = write_target(tmp_path / "untied", {"model.embed_tokens.weight": torch.zeros(512, 64)})
    with pytest.raises(DraftFormatError, match="does not tie it") as err:
        load_draft(folder, lm_head=untied)
    assert err.value.tensor == "lm_head.weight"
    with pytest.raises(DraftFormatError, match=r"\[vocab 512, hidden 64\]") as err:
        load_draft(folder, lm_head=torch.zeros(256, 64))
    assert err.value.tensor == "lm_head.weight"
    own = write_synthetic_draft(tmp_path / "own", "tiny")
    with pytest.raises(DraftFormatError, match="has its own lm_head"):
        load_draft(own, lm_head=torch.zeros(512, 64))
    with pytest.raises(DraftFormatError, match="pass lm_head="):
        load_draft(folder)
