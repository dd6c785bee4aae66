"""Strict, header-only reading of safetensors files.

Reads the 8-byte length and the JSON header, never the tensor data, and checks every entry:
known dtype, integer shape, offsets inside the data section, byte size equal to
numel * itemsize, no tensor named twice, and the tensors tiling the data section exactly (no
overlap, no gap, no trailing bytes: the rules the safetensors library enforces at load time).
Anything else raises ``CheckpointFileError`` naming the file and tensor.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import CheckpointFileError

DTYPE_SIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
MAX_HEADER_BYTES = 100_000_000     # the safetensors library's own limit (safetensors/src/tensor.rs MAX_HEADER_SIZE)


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and what it is, as the header says."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    data_offsets: tuple[int, int]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.data_offsets[1] - self.data_offsets[0]

    def load(self):
        """The tensor itself (a torch.Tensor), read from its file."""
        from safetensors import safe_open

        with safe_open(str(self.file), framework="pt") as fh:
            return fh.get_tensor(self.name)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int


def read_header(path: Path) -> SafetensorsHeader:
    """Read and check one safetensors header; raises ``CheckpointFileError``."""
    try:
        file_size = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise CheckpointFileError("file is shorter than the 8-byte header length", path=path)
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > file_size:
                raise CheckpointFileError(
                    f"header length {header_len} goes beyond the file ({file_size} bytes): truncated or "
                    "not a safetensors file",
                    path=path,
                )
            raw = fh.read(header_len)
    except OSError as exc:
        raise CheckpointFileError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    try:
        header = json.loads(raw, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise CheckpointFileError("named twice in the header", path=path, tensor=str(exc)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFileError(f"header is not valid JSON ({exc})", path=path) from exc
    except RecursionError:
        raise CheckpointFileError("header JSON is nested too deeply to be a safetensors header", path=path) from None
    if not isinstance(header, dict):
        raise CheckpointFileError("header is not a JSON object", path=path)

    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CheckpointFileError("__metadata__ is not an object", path=path)
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise CheckpointFileError(f"__metadata__ value {value!r} is not a string (safetensors allows only "
                                      "strings)", path=path, field=f"__metadata__.{key}")
    data_start = 8 + header_len
    data_size = file_size - data_start
    tensors = {name: _parse_entry(path, name, entry, data_size) for name, entry in header.items()}
    _check_tiling(path, tensors, data_size)
    return SafetensorsHeader(path=path, tensors=tensors, metadata=metadata, data_start=data_start)


def _parse_entry(path: Path, name: str, entry: object, data_size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointFileError("header entry is not an object", path=path, tensor=name)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise CheckpointFileError(f"unknown dtype {dtype!r}", path=path, tensor=name)
    if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
        raise CheckpointFileError(f"shape {shape!r} is not a list of non-negative integers", path=path,
                                  tensor=name)
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(_is_size(o) for o in offsets) or offsets[0] > offsets[1]):
        raise CheckpointFileError(f"data_offsets {offsets!r} are not [begin, end]", path=path, tensor=name)
    if offsets[1] > data_size:
        raise CheckpointFileError(
            f"data_offsets {offsets} go beyond the data section ({data_size} bytes): file truncated?",
            path=path, tensor=name)
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise CheckpointFileError(
            f"{dtype} {shape} needs {expected} bytes but data_offsets span {offsets[1] - offsets[0]}",
            path=path, tensor=name)
    return TensorInfo(name, dtype, tuple(shape), path, (offsets[0], offsets[1]))


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], data_size: int) -> None:
    end, end_name = 0, None
    for (begin, stop), name in sorted((t.data_offsets, t.name) for t in tensors.values() if t.nbytes):
        if begin < end:
            raise CheckpointFileError(f"bytes overlap those of '{end_name}'", path=path, tensor=name)
        if begin > end:
            raise CheckpointFileError(f"data starts at byte {begin}, expected {end} (a gap in the data section)",
                                      path=path, tensor=name)
        end, end_name = stop, name
    if end != data_size:
        raise CheckpointFileError(f"tensors cover {end} bytes but the data section holds {data_size}: "
                                  "trailing bytes or a corrupt header", path=path)
