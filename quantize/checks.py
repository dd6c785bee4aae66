"""Checks on tensor data and resources that must pass before Quark runs."""

from __future__ import annotations

from pathlib import Path

import torch

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.quantize.finite_scan import scan_source
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.util.resources import check_disk, check_memory, gb

# Resident after `import torch` + `import quark.torch` (measured 0.57 GB on CPU).
QUARK_BASE_BYTES = 600 * 10**6

def check_finite(draft: DraftCheckpoint) -> None:
    """NaN or Inf in any float tensor is refused (Quark would quietly write NaN scales).

    `quantize_draft` calls `scan_source` directly: the same streamed read also hashes the inputs."""
    scan_source(draft)


def check_vocab_map(draft: DraftCheckpoint) -> None:
    """Every draft id must map into the target vocab, target id = draft id + d2t[draft id] in [0, vocab), and no
    two draft ids to the same target id."""
    info = draft.checkpoint.tensors.get("d2t")
    if info is None:
        return
    d2t = info.load()
    ids = torch.arange(d2t.numel(), dtype=torch.int64)
    vocab = draft.config.vocab_size
    bad = ((d2t < -ids) | (d2t >= vocab - ids)).nonzero().flatten()  # compared, never added: no overflow
    if bad.numel():
        first = int(bad[0])
        raise DraftFormatError(f"draft id {first} maps to target id {first + int(d2t[first])}, expected one in "
                               f"[0, {vocab}) (the target vocab); {bad.numel()} id(s) out of range",
                               path=info.file, tensor="d2t")
    targets = ids + d2t
    ordered, order = torch.sort(targets, stable=True)
    repeated = (ordered[1:] == ordered[:-1]).nonzero().flatten()
    if repeated.numel():
        i = int(repeated[0])
        first, second = sorted((int(order[i]), int(order[i + 1])))
        raise DraftFormatError(f"draft ids {first} and {second} both map to target id {int(ordered[i])}; "
                               f"{repeated.numel()} duplicate target id(s): each target id must come from one draft "
                               "id", path=info.file, tensor="d2t")


def peak_memory_bytes(draft: DraftCheckpoint, quantized_weights: set[str], per_shard: bool) -> tuple[int, str]:
    """Estimated peak memory and the step that reaches it.

    Quark's file-to-file path (`per_shard`) loads one shard at a time: that shard plus float32 working copies
    of its largest quantized weight (measured peaks were 6-30% below this); the in-memory path holds the whole
    draft. Both add torch and Quark themselves."""
    shard_bytes: dict[Path, int] = {}
    working: dict[Path, int] = {}
    for name, info in draft.checkpoint.tensors.items():
        shard_bytes[info.file] = shard_bytes.get(info.file, 0) + info.nbytes
        if name in quantized_weights:
            working[info.file] = max(working.get(info.file, 0), 8 * info.numel)
    if not per_shard:
        total = sum(shard_bytes.values())
        return QUARK_BASE_BYTES + total + max(working.values(), default=0), f"holding the draft ({gb(total)})"
    peak, shard, size = max((b + working.get(f, 0), f.name, b) for f, b in shard_bytes.items())
    return QUARK_BASE_BYTES + peak, f"quantizing shard {shard} ({gb(size)})"


def check_resources(draft: DraftCheckpoint, out: Path, output_bytes: int, quantized_weights: set[str],
                    per_shard: bool = True) -> None:
    """Refuse before any tensor is read when OUT's disk or this machine's memory cannot hold the job."""
    check_disk(out.parent, output_bytes, f"the output ({gb(output_bytes)} estimated)")
    peak, step = peak_memory_bytes(draft, quantized_weights, per_shard)
    check_memory(peak, step, draft.path)
