"""Find and check the weight files of a checkpoint folder (single file or sharded with an index)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError, DraftFormatError, UnsupportedSourceError
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.reading.safetensors_header import SafetensorsHeader, TensorInfo, read_header

PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


@dataclass(frozen=True)
class Checkpoint:
    """Every tensor of a checkpoint folder, by name, with the file that holds it."""

    root: Path
    weight_files: tuple[Path, ...]
    index_file: Path | None
    tensors: dict[str, TensorInfo]

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def load_tensors(self) -> dict:
        """Every tensor, by name, read from its file."""
        return {name: info.load() for name, info in self.tensors.items()}


def read_checkpoint(root: Path) -> Checkpoint:
    """Read every header of the folder's safetensors weights and check their consistency."""
    check_links(root)
    index_files = sorted(root.glob("*.safetensors.index.json"))
    if len(index_files) > 1:
        raise CheckpointFileError(
            f"several shard indexes ({', '.join(p.name for p in index_files)}): keep one", path=root)
    if index_files:
        return _read_indexed(root, index_files[0])
    files = sorted(root.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise UnsupportedSourceError(
                f"only pickle weights ({', '.join(pickles)}); pickle can execute code and is refused",
                path=root, hint="quantize --allow-pickle loads them with torch.load(weights_only=True) and "
                "converts them to safetensors")
        raise DraftFormatError("no *.safetensors weights found", path=root)
    for f in files:
        _check_inside(root, f, f.name, root)
    headers = [read_header(f) for f in files]
    return Checkpoint(root, tuple(files), None, _merge(headers))


def read_weight_map(index_file: Path) -> dict[str, str]:
    """A shard index's tensor -> file map (safetensors or pickle), read with the limited JSON reader."""
    try:
        index = load_json_file(index_file, CheckpointFileError)
    except OSError as exc:
        raise CheckpointFileError(f"cannot read the shard index ({exc.strerror or exc})", path=index_file) from exc
    except CheckpointFileError as exc:      # invalid JSON, NaN/Infinity, too large or too deep
        raise CheckpointFileError(f"shard index is not valid JSON ({exc.message})", path=index_file,
                                  field=exc.field) from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointFileError("no 'weight_map' object of tensor -> file name", path=index_file,
                                  field="weight_map")
    return weight_map


def _read_indexed(root: Path, index_file: Path) -> Checkpoint:
    weight_map = read_weight_map(index_file)
    shard_names = sorted(set(weight_map.values()))
    shards = {name: _check_inside(root, root / name, name, index_file) for name in shard_names}
    stray = sorted(p.name for p in root.glob("*.safetensors") if p.name not in shards)
    if stray:
        raise CheckpointFileError(f"'{stray[0]}' is not named in the shard index: remove it or index it",
                                  path=index_file, field="weight_map")
    headers = {name: read_header(path) for name, path in shards.items()}
    tensors = _merge(list(headers.values()))
    for tensor, shard in weight_map.items():
        if tensor not in headers[shard].tensors:
            raise CheckpointFileError(f"index places it in '{shard}', which does not hold it",
                                      path=index_file, tensor=tensor)
    unindexed = sorted(set(tensors) - set(weight_map))
    if unindexed:
        raise CheckpointFileError(f"tensors missing from the index: {', '.join(unindexed[:5])}",
                                  path=index_file, field="weight_map")
    return Checkpoint(root, tuple(shards[n] for n in shard_names), index_file, tensors)


def link_roots(root: Path) -> tuple[Path, ...]:
    """Where links in the folder may lead: the folder, and for a Hub cache snapshot its repo's blobs."""
    resolved = root.resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith(("models--", "datasets--")):
        return resolved, resolved.parent.parent / "blobs"
    return (resolved,)


def check_links(root: Path) -> None:
    """Refuse any symlink in the folder that leads outside it: it would be read, copied and published."""
    allowed = link_roots(root)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            entry = Path(folder) / name
            if entry.is_symlink() and not any(entry.resolve().is_relative_to(a) for a in allowed):
                raise CheckpointFileError(f"'{entry.relative_to(root)}' is a link leading outside the checkpoint "
                                          f"folder (to {entry.resolve()})", path=root)


def _check_inside(root: Path, path: Path, name: str, referrer: Path) -> Path:
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise CheckpointFileError(f"shard path '{name}' points outside the checkpoint folder", path=referrer)
    resolved = path.resolve()
    if not any(resolved.is_relative_to(a) for a in link_roots(root)):
        raise CheckpointFileError(f"'{name}' is a link leading outside the checkpoint folder", path=referrer)
    if not resolved.is_file():
        raise CheckpointFileError(f"shard '{name}' is missing", path=referrer)
    return path


def _merge(headers: list[SafetensorsHeader]) -> dict[str, TensorInfo]:
    tensors: dict[str, TensorInfo] = {}
    for header in headers:
        for name, info in header.tensors.items():
            if name in tensors:
                raise CheckpointFileError(f"also stored in {tensors[name].file.name}", path=header.path,
                                          tensor=name)
            tensors[name] = info
    return tensors
