"""Read SpecForge's offline hidden-state files (scripts/prepare_hidden_states.py).

Layout: ``DUMP/rows_{a}-{b}/data_{i}.ckpt`` (older runs: ``data_{i}.ckpt`` anywhere below DUMP), each a
``torch.save`` of a dict: ``input_ids`` [T] int64 (possibly right-padded), ``loss_mask`` [T],
``hidden_state`` [1, T, H] (the target's last hidden state after its final norm, what its lm_head reads) and
``aux_hidden_state`` [1, T, 3H] (the three taps, SpecForge's output-of-layer count). The files record neither
the taps nor the target's predictions: the taps are taken from the draft, the next tokens are computed
from ``hidden_state`` with the target's lm_head. Files are read with ``weights_only=True`` (no code runs).
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.errors import CalibrationDataError
from eagle3_quant.records.sample_limits import check_declared_bytes, check_finite

FILE_PATTERN = re.compile(r"^data_(\d+)\.ckpt$")


@dataclass(frozen=True)
class SpecForgeRecord:
    input_ids: torch.Tensor        # int64 [T]
    aux_hidden_state: torch.Tensor  # [T, 3H]
    hidden_state: torch.Tensor      # [T, H]


def is_specforge_dump(folder: Path) -> bool:
    return folder.is_dir() and next(iter(find_files(folder)), None) is not None


def find_files(folder: Path) -> list[Path]:
    """Every data_{i}.ckpt below FOLDER, ordered by i."""
    found = [p for p in folder.rglob("data_*.ckpt") if FILE_PATTERN.match(p.name)]
    return sorted(found, key=lambda p: int(FILE_PATTERN.match(p.name).group(1)))


def _squeeze(value, name: str, dims: int, file: Path) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise CalibrationDataError(f"{name} is {type(value).__name__}, expected a tensor", path=file, field=name)
    while value.dim() > dims and value.shape[0] == 1:
        value = value[0]
    if value.dim() != dims:
        raise CalibrationDataError(f"{name} has shape {tuple(value.shape)}, expected {dims} dimension(s) "
                                   "(after a leading batch of 1)", path=file, field=name)
    return value


def declared_bytes(file: Path) -> int:
    """The bytes a torch.save archive expands to, as its zip directory declares them, read before torch.load: a
    record stored compressed (torch.save stores them plain) or declaring more than the whole file is refused."""
    try:
        size = file.stat().st_size
        with zipfile.ZipFile(file) as archive:
            records = archive.infolist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise CalibrationDataError(f"cannot read as a SpecForge hidden-state file (not a torch.save zip archive: "
                                   f"{exc})", path=file) from None
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED or record.file_size > size:
            raise CalibrationDataError(f"record {record.filename!r} declares {record.file_size} bytes in a {size}-byte "
                                       "file (compressed): not what torch.save writes", path=file)
    return sum(record.file_size for record in records)


def read_record(file: Path) -> SpecForgeRecord:
    check_declared_bytes(declared_bytes(file), file, CalibrationDataError)
    try:
        data = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises pickle / runtime / zip errors for a damaged or unsafe file
        raise CalibrationDataError(f"cannot read as a SpecForge hidden-state file ({type(exc).__name__}: {exc})",
                                   path=file) from exc
    if not isinstance(data, dict):
        raise CalibrationDataError(f"holds {type(data).__name__}, expected a dict", path=file)
    for key in ("input_ids", "aux_hidden_state", "hidden_state"):
        if data.get(key) is None:
            raise CalibrationDataError("missing (was it made with --enable-aux-hidden-states?)" if
                                       key == "aux_hidden_state" else "missing", path=file, field=key)
    ids = _squeeze(data["input_ids"], "input_ids", 1, file)
    aux = _squeeze(data["aux_hidden_state"], "aux_hidden_state", 2, file)
    last = _squeeze(data["hidden_state"], "hidden_state", 2, file)
    check_finite({"aux_hidden_state": aux, "hidden_state": last}, file, CalibrationDataError)
    length = aux.shape[0]
    if ids.shape[0] < length or last.shape[0] != length:
        raise CalibrationDataError(f"lengths disagree: input_ids {ids.shape[0]}, aux_hidden_state {length}, "
                                   f"hidden_state {last.shape[0]}", path=file)
    return SpecForgeRecord(ids[:length].to(torch.int64), aux, last)  # right padding beyond the states dropped
