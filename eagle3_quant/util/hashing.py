"""Streamed sha256 of files (never a whole file in memory), optionally visiting byte ranges on the way.

One sequential read per file serves both the digest and any per-tensor work (NaN scan, byte comparison),
so a checkpoint is read once, in CHUNK-sized pieces, however many checks look at it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError

CHUNK = 16 * 1024 * 1024

# Called with successive pieces of a range: (bytes of the piece, offset of the piece inside the range).
RangeVisitor = Callable[[memoryview, int], None]


@dataclass(frozen=True)
class FileDigest:
    path: str      # relative to its folder
    size: int
    sha256: str

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class ByteRange:
    """Absolute [start, end) of a file whose pieces go to `visit`; pieces start at multiples of the chunk."""

    start: int
    end: int
    visit: RangeVisitor


def sha256_file(path: Path, ranges: Sequence[ByteRange] = (), chunk: int | None = None) -> str:
    """sha256 of the whole file in one sequential read, handing each range's pieces to its visitor.

    Ranges must not overlap. A visitor raising stops the read and the exception propagates.
    `chunk` (default CHUNK) is the piece size and the only buffer held.
    """
    digest = hashlib.sha256()
    position = 0
    with path.open("rb", buffering=0) as fh:
        chunk = chunk or CHUNK
        view = memoryview(bytearray(max(1, min(chunk, os.fstat(fh.fileno()).st_size))))

        def read_to(end: int | None, visit: RangeVisitor | None = None, range_start: int = 0) -> None:
            nonlocal position
            while end is None or position < end:
                want = len(view) if end is None else min(len(view), end - position)
                got = read_full(fh, view[:want])
                if got == 0:
                    return
                digest.update(view[:got])
                if visit is not None:
                    visit(view[:got], position - range_start)
                position += got
                if got < want:
                    return

        for byte_range in sorted(ranges, key=lambda r: r.start):
            read_to(byte_range.start)
            read_to(byte_range.end, byte_range.visit, byte_range.start)
            if position < byte_range.end:
                raise CheckpointFileError(f"ends at byte {position}, inside tensor data that runs to byte "
                                          f"{byte_range.end}: truncated or changed while being read", path=path)
        read_to(None)
    return digest.hexdigest()


def read_full(fh, target: memoryview | bytearray) -> int:
    """readinto until TARGET is full or the file ends; returns the bytes read."""
    filled = 0
    while filled < len(target):
        n = fh.readinto(target[filled:])
        if not n:
            break
        filled += n
    return filled


def digest_folder(root: Path, skip: frozenset[str] = frozenset(),
                  ranges: Mapping[Path, Sequence[ByteRange]] | None = None, workers: int = 1,
                  chunk: int | None = None) -> list[FileDigest]:
    """Digest every non-hidden file under ROOT; `ranges` (keyed by resolved path) adds visitors to some files.

    With `workers` > 1, files are read in parallel threads (hashing and file reads release the GIL).
    """
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name not in skip
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    ranges = ranges or {}

    def one(path: Path) -> FileDigest:
        sha = sha256_file(path, ranges.get(path.resolve(), ()), chunk)
        return FileDigest(str(path.relative_to(root)), path.stat().st_size, sha)

    if workers <= 1 or len(files) <= 1:
        return [one(p) for p in files]
    biggest_first = sorted(files, key=lambda p: -p.stat().st_size)
    with ThreadPoolExecutor(min(workers, len(files))) as pool:
        futures = {p: pool.submit(one, p) for p in biggest_first}
        try:
            return [futures[p].result() for p in files]
        except BaseException:     # a visitor refused: do not start reading the files still queued
            for future in futures.values():
                future.cancel()
            raise
