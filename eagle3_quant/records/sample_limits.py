"""What one hidden-state sample may be, in every format a sample is read from (a calibration set's shards, SpecForge
files, vLLM and speculators dumps): the bytes its file declares for it are bounded before anything is read, and
every float tensor of it is finite once read. Errors name the file (and sample) and the tensor."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from eagle3_quant.errors import DraftFormatError, Eagle3QuantError
from eagle3_quant.reading.safetensors_header import SafetensorsHeader
from eagle3_quant.util.resources import check_memory, gb

# One sample's tensors as its file declares them. 16,384 tokens x 4 states x hidden 8,192 in bfloat16 is 1 GiB; a
# header declaring more is refused before a byte of it is read, and so is one the free memory cannot hold.
MAX_SAMPLE_BYTES = 2 << 30


def check_declared_bytes(declared: int, where: str | Path, error: type[Eagle3QuantError] = DraftFormatError) -> None:
    """Refuse a sample whose file declares more than MAX_SAMPLE_BYTES, or more than the free memory."""
    if declared > MAX_SAMPLE_BYTES:
        raise error(f"declares {gb(declared)} for one sample, more than the {gb(MAX_SAMPLE_BYTES)} a sample may hold: "
                    "refused before reading", path=where)
    check_memory(declared, "reading this sample", where)


def header_bytes(header: SafetensorsHeader, names: Iterable[str]) -> int:
    """The bytes `header` declares for the tensors `names` it holds (its offsets already checked against the file)."""
    return sum(header.tensors[name].nbytes for name in names if name in header.tensors)


def check_finite(tensors: Mapping[str, torch.Tensor], where: str | Path,
                 error: type[Eagle3QuantError] = DraftFormatError) -> None:
    """NaN/Inf states would give NaN scales, tables and next tokens: every float tensor of a sample must be finite."""
    for name, values in tensors.items():
        if values.dtype.is_floating_point and values.numel():
            low, high = torch.aminmax(values.detach())
            if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
                count = int((~torch.isfinite(values)).sum())
                raise error(f"{name} hold {count} NaN/Inf value(s); expected finite states", path=where, field=name)
