"""The target's output projection (lm_head, or the tied embedding) read straight from its safetensors."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.errors import CheckpointFileError, SourceNotFoundError
from eagle3_quant.reading.checkpoint import read_weight_map
from eagle3_quant.reading.hub_errors import hub_failure, hub_reads

VOCAB_CHUNK = 16384


def _tensor_files(target: str) -> tuple[dict[str, str], Path]:
    """Tensor name -> file name, and the folder holding the files (a Hub target fetches only the index)."""
    folder = Path(target)
    if not folder.is_dir():
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        with hub_reads(target):
            try:
                index = Path(hf_hub_download(target, "model.safetensors.index.json"))
            except EntryNotFoundError as exc:
                if hub_failure(exc, target) is not None:        # offline or unreachable, not a missing file
                    raise
                single = Path(hf_hub_download(target, "model.safetensors"))
                return _names_in(single), single.parent
        return read_weight_map(index), index.parent
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        return read_weight_map(indexes[0]), folder
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SourceNotFoundError("holds no safetensors weights to read the lm_head from", path=folder)
    names: dict[str, str] = {}
    for file in files:
        names.update(_names_in(file))
    return names, folder


def _names_in(file: Path) -> dict[str, str]:
    with safe_open(str(file), framework="pt") as fh:
        return {name: file.name for name in fh.keys()}


def load_lm_head(target: str) -> torch.Tensor:
    """[V, H] weight of `lm_head`, or of `embed_tokens` when the head is tied to the embedding."""
    names, folder = _tensor_files(target)
    for suffix in ("lm_head.weight", "embed_tokens.weight"):
        found = sorted((n for n in names if n.endswith(suffix)), key=len)
        if found:
            shard = names[found[0]]
            if not isinstance(shard, str) or Path(shard).is_absolute() or ".." in Path(shard).parts:
                raise CheckpointFileError(f"the shard index places {found[0]} in {shard!r}, outside the target "
                                          "folder", path=folder, field="weight_map")
            file = folder / shard
            if not file.exists():
                from huggingface_hub import hf_hub_download

                file = Path(hf_hub_download(target, names[found[0]]))
            with safe_open(str(file), framework="pt") as fh:
                return fh.get_tensor(found[0])
    raise CheckpointFileError("has neither lm_head.weight nor embed_tokens.weight", path=target)


def argmax_logits(hidden: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
    """argmax over the vocab of hidden @ lm_head.T in float32, a vocab chunk at a time (int64 [T])."""
    hidden = hidden.float()
    best = torch.full((hidden.shape[0],), float("-inf"))
    best_ids = torch.zeros(hidden.shape[0], dtype=torch.int64)
    for start in range(0, lm_head.shape[0], VOCAB_CHUNK):
        logits = hidden @ lm_head[start:start + VOCAB_CHUNK].float().T
        value, index = logits.max(-1)
        better = value > best
        best = torch.where(better, value, best)
        best_ids = torch.where(better, index + start, best_ids)
    return best_ids
