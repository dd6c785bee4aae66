"""Synthetic drafts for the benchmark, built once into a cache folder and reused between runs."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.reading.formats import DraftFormat

DEFAULT_CACHE = Path(__file__).resolve().parent / "cache"


@dataclass(frozen=True)
class BenchShape:
    name: str
    shards: int
    repeat: int          # default number of repeats per contender


BENCH_SHAPES: dict[str, BenchShape] = {
    "tiny": BenchShape("tiny", 1, 3),
    "llama3-8b": BenchShape("llama3-8b", 1, 5),
    "kimi-k2.5": BenchShape("kimi-k2.5", 4, 3),
}


def cached_draft(shape: BenchShape, cache: Path = DEFAULT_CACHE) -> Path:
    """The SpecForge-format draft of `shape` under `cache`, written once (a marker says it is complete)."""
    from fixtures.synthetic import write_synthetic_draft

    folder = cache / f"{shape.name}-{shape.shards}shard"
    spec = {"shape": shape.name, "shards": shape.shards, "format": DraftFormat.SPECFORGE.value, "seed": 0}
    mark = folder.with_name(folder.name + ".complete")   # beside the draft: Quark copies every file inside
    if mark.is_file() and json.loads(mark.read_text()) == spec:
        return folder
    mark.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    write_synthetic_draft(folder, shape.name, DraftFormat.SPECFORGE, seed=0, shards=shape.shards)
    mark.write_text(json.dumps(spec))
    return folder


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
