"""Streamed sha256 of files (never a whole file in memory)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True)
class FileDigest:
    path: str      # relative to its folder
    size: int
    sha256: str

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def digest_folder(root: Path, skip: frozenset[str] = frozenset()) -> list[FileDigest]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in skip
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    return [FileDigest(str(p.relative_to(root)), p.stat().st_size, sha256_file(p)) for p in files]
