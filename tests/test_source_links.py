"""Symlinks in a source folder: inside links and the Hub cache layout are fine, anything else is refused."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from corpus.builders import SINGLE, pickle_draft, tiny

from eagle3_quant.errors import CheckpointFileError, DraftFormatError
from eagle3_quant.reading.draft import read_draft


def as_hub_cache(src, cache_root):
    """Lay SRC out as huggingface_hub's cache does: snapshots/<commit>/<file> -> ../../blobs/<sha256>."""
    repo = cache_root / "models--org--draft"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for path in sorted(src.iterdir()):
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, repo / "blobs" / blob)
        (snapshot / path.name).symlink_to(f"../../blobs/{blob}")
    return snapshot


def test_links_inside_the_folder_are_fine(tmp_path):
    src = tiny(tmp_path)
    (src / "weights").mkdir()
    (src / SINGLE).rename(src / "weights" / SINGLE)
    (src / SINGLE).symlink_to(f"weights/{SINGLE}")
    assert read_draft(src).checkpoint.tensors["fc.weight"].shape == (64, 192)


def test_hub_cache_snapshot_reads_and_its_links_stay_in_the_repo(tmp_path):
    snapshot = as_hub_cache(tiny(tmp_path), tmp_path / "hub")
    assert read_draft(snapshot).config.hidden_size == 64
    (tmp_path / "secret.txt").write_text("token\n")
    (snapshot / "notes.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(CheckpointFileError, match="'notes.txt' is a link leading outside the checkpoint folder"):
        read_draft(snapshot)


def test_a_linked_folder_leading_outside_is_refused(tmp_path):
    src = tiny(tmp_path)
    (tmp_path / "home").mkdir()
    (src / "extras").symlink_to(tmp_path / "home", target_is_directory=True)
    with pytest.raises(CheckpointFileError, match="'extras' is a link leading outside"):
        read_draft(src)


@pytest.fixture
def hub_cache(hub_client, tmp_path, monkeypatch):
    """huggingface_hub's download cache in tmp_path (it reads HF_HOME only at import)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return hub_client


def upload(hub_client, folder, repo_id):
    hub_client.create_repo(repo_id, exist_ok=True)
    hub_client.upload_folder(repo_id=repo_id, folder_path=str(folder))


def test_a_hub_draft_reads_through_the_cache_links(hub_cache, tmp_path):
    upload(hub_cache, tiny(tmp_path), "alice/tiny-draft")
    draft = read_draft("alice/tiny-draft")
    assert draft.source.repo_id == "alice/tiny-draft" and (draft.path / SINGLE).is_symlink()
    assert draft.path.is_relative_to(tmp_path / "hub-cache")
    assert draft.checkpoint.tensors["fc.weight"].shape == (64, 192)


@pytest.mark.slow
def test_a_pickle_only_hub_draft_is_fetched_and_converted_only_with_opt_in(hub_cache, tmp_path):
    from eagle3_quant.quantize.api import quantize_draft

    upload(hub_cache, pickle_draft(tmp_path / "pkl"), "alice/pickle-draft")
    with pytest.raises(DraftFormatError, match="no \\*.safetensors weights found"):
        quantize_draft("alice/pickle-draft", tmp_path / "out", device="cpu")
    result = quantize_draft("alice/pickle-draft", tmp_path / "out", device="cpu", allow_pickle=True)
    assert result.manifest.source.repo_id == "alice/pickle-draft"
    assert result.manifest.source.pickle_converted is True
    assert (tmp_path / "out").is_dir() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
