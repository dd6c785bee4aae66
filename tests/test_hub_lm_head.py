"""A draft sharing its target's lm_head reads that one tensor from a Hub target by HTTP range requests: the
shard index, the holding shard's header and the tensor's bytes; never the shard (bytes counted by the local Hub
server of tests/hub_server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hub_server.fixtures import hub, hub_client  # noqa: F401
from safetensors.torch import save_file

from eagle3_quant import load_draft
from eagle3_quant.errors import DraftFormatError, SourceNotFoundError
from eagle3_quant.runtime.embedding import read_target_lm_head
from fixtures.synthetic import write_synthetic_draft

VOCAB, HIDDEN = 512, 64          # tiny-minimax-m3's full vocabulary and hidden size
HEADER_ALLOWANCE = 4096           # 8-byte length + JSON header of a shard with a few tensors


@pytest.fixture
def hub_cache(hub_client, tmp_path, monkeypatch):  # noqa: F811
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return hub_client


def _tensor(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _sharded_target(folder: Path, head_name: str | None = "lm_head.weight", tied: bool = False) -> dict:
    """A target in two shards: the embedding and a layer in the first, the (big) lm_head and norm in the second."""
    folder.mkdir(parents=True)
    first = {"model.embed_tokens.weight": _tensor(VOCAB, HIDDEN, seed=1),
             "model.layers.0.mlp.down_proj.weight": _tensor(HIDDEN, 4 * HIDDEN, seed=2)}
    second = {"model.norm.weight": _tensor(HIDDEN, seed=3), "model.layers.1.mlp.up_proj.weight":
              _tensor(8 * HIDDEN, HIDDEN, seed=4)}
    if head_name:
        second[head_name] = _tensor(VOCAB, HIDDEN, seed=5)
    shards = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    for file, tensors in shards.items():
        save_file(tensors, folder / file, metadata={"format": "pt"})
    weight_map = {name: file for file, tensors in shards.items() for name in tensors}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"],
                                                    "tie_word_embeddings": tied}))
    return {**first, **second}


def _upload(client, folder: Path, repo_id: str) -> None:
    client.create_repo(repo_id, exist_ok=True)
    client.upload_folder(repo_id=repo_id, folder_path=str(folder))


def test_hub_lm_head_is_read_by_range_requests_not_by_downloading_its_shard(hub_cache, hub, tmp_path):  # noqa: F811
    tensors = _sharded_target(tmp_path / "target")
    _upload(hub_cache, tmp_path / "target", "alice/target")
    hub.bytes_served.clear()
    head = read_target_lm_head("alice/target")
    assert head.dtype == torch.bfloat16 and torch.equal(head, tensors["lm_head.weight"])
    assert torch.equal(head, read_target_lm_head(tmp_path / "target"))          # the local folder path agrees
    served = {path.rsplit("/", 1)[-1]: n for path, n in hub.bytes_served.items()}
    head_bytes = VOCAB * HIDDEN * 2
    shard = (tmp_path / "target" / "model-00002-of-00002.safetensors").stat().st_size
    assert head_bytes <= served["model-00002-of-00002.safetensors"] <= head_bytes + HEADER_ALLOWANCE
    assert served["model-00002-of-00002.safetensors"] < shard - 8 * HIDDEN * HIDDEN * 2     # not the whole shard
    assert "model-00001-of-00002.safetensors" not in served                             # the other shard untouched
    assert set(served) == {"model.safetensors.index.json", "model-00002-of-00002.safetensors"}


def test_tied_and_single_file_hub_targets(hub_cache, hub, tmp_path):  # noqa: F811
    tensors = _sharded_target(tmp_path / "tied", head_name=None, tied=True)
    _upload(hub_cache, tmp_path / "tied", "alice/tied")
    assert torch.equal(read_target_lm_head("alice/tied"), tensors["model.embed_tokens.weight"])
    single = tmp_path / "single"
    single.mkdir()
    head = _tensor(VOCAB, HIDDEN, seed=9).float()
    save_file({"lm_head.weight": head, "model.norm.weight": torch.ones(HIDDEN)}, single / "model.safetensors")
    (single / "config.json").write_text("{}")
    _upload(hub_cache, single, "alice/single")
    hub.bytes_served.clear()
    got = read_target_lm_head("alice/single")
    assert got.dtype == torch.float32 and torch.equal(got, head)
    assert sum(hub.bytes_served.values()) <= head.numel() * 4 + HEADER_ALLOWANCE


def test_shared_lm_head_draft_runs_on_the_hub_targets_head(hub_cache, tmp_path):
    draft = write_synthetic_draft(tmp_path / "m3", "tiny-minimax-m3")
    tensors = _sharded_target(tmp_path / "target")
    _upload(hub_cache, tmp_path / "target", "alice/target")
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, 6), generator=gen)
    aux = torch.randn(1, 6, 4 * HIDDEN, generator=gen)
    emb = tensors["model.embed_tokens.weight"].float()
    expected, _ = load_draft(draft, dtype=torch.float32, embedding=emb, lm_head=tensors["lm_head.weight"])(ids, aux)
    got, _ = load_draft(draft, dtype=torch.float32, embedding=emb, lm_head="alice/target")(ids, aux)
    assert torch.equal(got, expected)


def test_hub_lm_head_errors_are_named(hub_cache, tmp_path):
    _sharded_target(tmp_path / "untied", head_name=None)
    _upload(hub_cache, tmp_path / "untied", "alice/untied")
    with pytest.raises(DraftFormatError, match="does not tie it") as err:
        read_target_lm_head("alice/untied")
    assert err.value.tensor == "lm_head.weight" and err.value.path == "alice/untied"
    with pytest.raises(SourceNotFoundError, match="no such repository") as err:
        read_target_lm_head("alice/no-such-target")
    assert err.value.path == "alice/no-such-target" and "\n" not in str(err.value)
    with pytest.raises(DraftFormatError, match="not a Hub repo id"):
        read_target_lm_head(tmp_path / "missing" / "folder")
