"""Checks on tensor data and resources that must pass before Quark runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.draft import DraftCheckpoint
from eagle3_quant.errors import DraftFormatError, ResourceError
from eagle3_quant.safetensors_header import FLOAT_DTYPES

ROWS_PER_CHUNK = 4096


def check_finite(draft: DraftCheckpoint) -> None:
    """NaN or Inf in any float tensor is refused (Quark would quietly write NaN scales)."""
    by_file: dict[Path, list[str]] = {}
    for name, info in draft.checkpoint.tensors.items():
        if info.dtype in FLOAT_DTYPES:
            by_file.setdefault(info.file, []).append(name)
    for file, names in by_file.items():
        with safe_open(str(file), framework="pt") as fh:
            for name in names:
                sliced = fh.get_slice(name)
                rows = draft.checkpoint.tensors[name].shape[0] if draft.checkpoint.tensors[name].shape else 1
                for start in range(0, max(rows, 1), ROWS_PER_CHUNK):
                    chunk = sliced[start:start + ROWS_PER_CHUNK] if draft.checkpoint.tensors[name].shape \
                        else fh.get_tensor(name)
                    if not bool(torch.isfinite(chunk).all()):
                        bad = int((~torch.isfinite(chunk)).sum())
                        raise DraftFormatError(f"holds {bad} NaN/Inf value(s) in rows {start}.."
                                               f"{start + len(chunk) - 1}", path=file, tensor=name)


def check_disk(out_parent: Path, needed_bytes: int) -> None:
    probe = out_parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed_bytes * 1.05:
        raise ResourceError(f"needs {needed_bytes / 1e9:.2f} GB free for the output, "
                            f"{free / 1e9:.2f} GB available", path=probe)
