"""`inspect` on a Hub id reads config.json and the safetensors headers by range requests: no weights are
downloaded (checked against the local Hub server's byte counts)."""

from __future__ import annotations

import pytest

from eagle3_quant.errors import DraftFormatError, SourceNotFoundError
from eagle3_quant.inspection import inspect_draft
from fixtures.synthetic import DraftShape, write_synthetic_draft

# weight files well above the 100 kB huggingface_hub fetches first
SHAPE = DraftShape(256, 512, 4, 2, 64, 1024, 512, target_layers=8)


@pytest.fixture
def hub_cache(hub_client, tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return hub_client


def _upload(client, folder, repo_id):
    client.create_repo(repo_id, exist_ok=True)
    client.upload_folder(repo_id=repo_id, folder_path=str(folder))


@pytest.mark.parametrize("shards", [1, 3])
def test_inspect_hub_id_reads_headers_only(hub_cache, hub, tmp_path, shards):
    src = write_synthetic_draft(tmp_path / "src", SHAPE, shards=shards)
    _upload(hub_cache, src, "alice/draft")
    local = inspect_draft(src)
    hub.bytes_served.clear()
    report = inspect_draft("alice/draft")
    assert report.source.startswith("alice/draft@")
    assert report.linears == local.linears and report.params_by_part == local.params_by_part
    assert report.source_bytes == local.source_bytes and report.weight_files == shards
    weights = {p.name: p.stat().st_size for p in src.glob("*.safetensors")}
    served = {path.rsplit("/", 1)[-1]: n for path, n in hub.bytes_served.items()}
    assert served.get("config.json", 0) == (src / "config.json").stat().st_size
    for name, size in weights.items():
        assert 0 < served[name] < min(size, 100_001 + 8), (name, served[name], size)
    assert sum(served[n] for n in weights) < sum(weights.values()) / 2


def test_inspect_hub_id_of_a_family_draft(hub_cache, tmp_path):
    _upload(hub_cache, write_synthetic_draft(tmp_path / "mla", "tiny-mla"), "alice/mla-draft")
    report = inspect_draft("alice/mla-draft")
    assert report.family == "mla" and "kv_b_proj" in {row.role for row in report.linears if not row.quantize}


def test_inspect_hub_errors_are_named(hub_cache, tmp_path):
    with pytest.raises(SourceNotFoundError, match="no such repository"):
        inspect_draft("alice/nothing-here")
    folder = tmp_path / "no-weights"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    _upload(hub_cache, folder, "alice/no-weights")
    with pytest.raises(DraftFormatError, match="no model.safetensors"):
        inspect_draft("alice/no-weights")
