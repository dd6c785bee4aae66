"""Which files a push sends, checked against the manifest, and which of them the remote already holds."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.records.bench_run import BENCH_NAME
from eagle3_quant.records.evidence import CARD_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest, output_path
from eagle3_quant.records.speedup_estimate import ESTIMATE_NAME
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.util.hashing import CHUNK, sha256_file

# Files written after quantization: not listed in the manifest's outputs, sent all the same.
ADDED_FILES = {MANIFEST_NAME: "manifest", CARD_NAME: "card", REPORT_NAME: "validation report",
               ESTIMATE_NAME: "speedup estimate", BENCH_NAME: "engine run"}


@dataclass(frozen=True)
class PushFile:
    path: str          # relative to OUT, posix
    size: int
    sha256: str
    kind: str          # "artifact" (in the manifest), "manifest", "card", "validation report"
    action: str = "send"   # "send" | "upload" | "unchanged"


def git_blob_oid(path: Path) -> str:
    """The git object id of a file, as the Hub reports it for files stored without LFS."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def files_to_send(out: Path, manifest: Manifest) -> list[PushFile]:
    """The artifact's files as the manifest lists them, then the files written about it that OUT holds (the card
    aside: push renders it). OUT's integrity is `records.evidence.check_integrity`'s, asked before."""
    listed = {entry.path: entry for entry in manifest.outputs}
    files = [PushFile(rel, entry.size, entry.sha256, "artifact") for rel, entry in listed.items() if rel != CARD_NAME]
    for name, kind in ADDED_FILES.items():
        if name != CARD_NAME and (out / name).is_file() and output_path(out, name, out / MANIFEST_NAME):
            files.append(PushFile(name, (out / name).stat().st_size, sha256_file(out / name), kind))
    return files


def same_as_remote(out: Path, local: PushFile, remote) -> bool:
    """`remote` is a huggingface_hub RepoFile (or None): LFS files compare by sha256, others by git oid."""
    if remote is None or remote.size is None:
        return False
    if remote.lfs is not None:
        return remote.lfs.sha256 == local.sha256 and remote.lfs.size == local.size
    return remote.size == local.size and remote.blob_id == git_blob_oid(out / local.path)
