"""Symlinks in a source folder: inside links and the Hub cache layout are fine, anything else is refused."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from corpus.builders import SINGLE, tiny

from eagle3_quant.draft import read_draft
from eagle3_quant.errors import CheckpointFileError


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
