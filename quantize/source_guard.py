"""What was checked is what was used: the source must not change between its scan and the last read of it.

The scan (sha256 + NaN/Inf + the header checks before it) and Quark read the same paths at different times; a
shard replaced in between would be quantized while the manifest records the scanned bytes. So every source
file's identity (device, inode, size, mtime, ctime) is taken before the scan, and after the last read (Quark,
the side-file copy and the export check) the files are stat'ed and hashed again and their headers re-read:
any difference refuses the run and nothing is put in place. A replaced file shows a new inode, a rewrite a new
mtime/ctime (ctime cannot be set back by a user), and any byte change a new sha256.
"""

from __future__ import annotations

import os
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.safetensors_header import read_header
from eagle3_quant.util.hashing import FileDigest, digest_folder

Identity = tuple[int, int, int, int, int]


def _identity(path: Path) -> Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def source_files(root: Path) -> list[Path]:
    """The files the scan hashes: every non-hidden file under ROOT (links followed)."""
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def identities(root: Path, draft: DraftCheckpoint | None = None) -> dict[Path, Identity | None]:
    """Taken before the scan: every source file, and the draft's weight files wherever they lie."""
    files = set(source_files(root))
    if draft is not None:
        files |= set(draft.checkpoint.weight_files)
    return {path: _identity(path) for path in sorted(files)}


def _changed(path: Path) -> CheckpointFileError:
    return CheckpointFileError("changed while it was being quantized (replaced or rewritten after the safety "
                               "scan); nothing was written", path=path,
                               hint="make sure nothing writes the source during the run, then run again")


def check_source_unchanged(root: Path, scanned: list[FileDigest], before: dict[Path, Identity | None],
                           draft: DraftCheckpoint | None = None) -> None:
    """Raise ``CheckpointFileError`` naming the first source file that differs from what was scanned."""
    now = set(source_files(root))
    for path in sorted(now.symmetric_difference(p for p in before if p.is_relative_to(root))):
        raise _changed(path)
    for path, identity in before.items():
        if _identity(path) != identity:
            raise _changed(path)
    if draft is not None:
        for file in draft.checkpoint.weight_files:
            header = read_header(file).tensors
            if any(header.get(name) != info for name, info in draft.checkpoint.tensors.items() if info.file == file):
                raise _changed(file)
    rehashed = {d.path: d for d in digest_folder(root, workers=2)}
    for digest in scanned:
        if rehashed.get(digest.path) != digest:
            raise _changed(root / digest.path)
