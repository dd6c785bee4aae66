"""A calibration set's index as read back: every shard path inside the set's folder, every field of the declared
type. Checked before any shard is opened; errors name the index or shard (samples: `sample_limits.py`)."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import DraftFormatError


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def shard_path(folder: Path, name: object, index_path: Path) -> Path:
    """folder/name, refused unless `name` is a plain relative file name that resolves inside the folder."""
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise DraftFormatError(f"shard file {name!r} is not a path inside the calibration folder",
                               path=index_path, field="shards.file")
    path = folder / name
    if not path.resolve().is_relative_to(folder.resolve()):
        raise DraftFormatError(f"shard file {name!r} is a link leading outside the calibration folder",
                               path=index_path, field="shards.file")
    return path


def check_shards(folder: Path, shards: object, index_path: Path) -> tuple[dict, ...]:
    """Every shard entry: {"file": inside the folder, "samples": [int], "generated_from": [int|None], "tokens": int}."""
    if not isinstance(shards, list):
        raise DraftFormatError("'shards' is not a list", path=index_path, field="shards")
    seen: set[int] = set()
    for n, shard in enumerate(shards):
        where = f"shards[{n}]"
        if not isinstance(shard, dict):
            raise DraftFormatError(f"{where} is not an object", path=index_path, field=where)
        shard_path(folder, shard.get("file"), index_path)
        samples, generated = shard.get("samples"), shard.get("generated_from")
        if not isinstance(samples, list) or not all(_is_int(i) and i >= 0 for i in samples):
            raise DraftFormatError(f"{where}.samples is not a list of sample numbers", path=index_path,
                                   field=f"{where}.samples")
        if seen & set(samples):
            raise DraftFormatError(f"{where}.samples repeats sample(s) {sorted(seen & set(samples))[:3]}",
                                   path=index_path, field=f"{where}.samples")
        seen |= set(samples)
        if not isinstance(generated, list) or len(generated) != len(samples) or \
                not all(g is None or (_is_int(g) and g >= 0) for g in generated):
            raise DraftFormatError(f"{where}.generated_from is not one position (or null) per sample",
                                   path=index_path, field=f"{where}.generated_from")
        if not _is_int(shard.get("tokens")) or shard["tokens"] < 0:
            raise DraftFormatError(f"{where}.tokens is not a token count", path=index_path, field=f"{where}.tokens")
    return tuple(shards)
