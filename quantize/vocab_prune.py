"""Vocabulary pruning: keep the N target tokens the target itself emits most often, as a pre-pass.

The calibration set stores the target's argmax next token at every position (``target_next_ids``); those are
counted, and the N most frequent tokens of the draft's current vocabulary are kept (ties by lower target id).
Only tokens of the current vocabulary can be kept: ``lm_head`` has rows for nothing else. The pruned BF16
draft is written to a private folder beside OUT, and goes through the normal quantize path from there (the
checks, the export verification and the manifest stay one path):

- ``lm_head.weight``: the kept rows, in ascending target id (draft id i = the i-th kept token);
- ``d2t`` int64 [N]: offsets, ``target id = draft id + d2t[draft id]``; ``t2d`` bool [V]: the kept target ids;
- ``config.json``: ``draft_vocab_size`` N; every other tensor, key and file as in the source.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from eagle3_quant.errors import CalibrationDataError, SchemeError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.pickle_source import BASE_BYTES
from eagle3_quant.records.public_names import public_name
from eagle3_quant.util.outdir import scratch_for
from eagle3_quant.util.resources import check_disk, check_memory, gb


@dataclass(frozen=True)
class VocabPruning:
    """What the pruning kept and how much of the calibration set's target tokens it covers."""

    calibration: str
    draft_vocab_before: int
    draft_vocab: int
    target_tokens: int          # target next-token positions counted in the calibration set
    distinct_tokens: int        # distinct target tokens among them
    coverage: float             # share of those positions whose token is kept
    coverage_before: float      # the same for the current draft vocabulary
    kept_target_ids_sha256: str
    ranked_tokens: int | None = None    # tokens of the current vocabulary the set ranks; fewer than draft_vocab:
                                        # the rest were kept by id alone, not by frequency (None: older record)

    def to_dict(self) -> dict:
        return asdict(self)


def target_token_counts(calib_path: str | Path, vocab: int) -> torch.Tensor:
    """int64 [vocab]: how often the target emits each token in the calibration set (its argmax next tokens)."""
    from eagle3_quant.records.calibration import load_calibration

    calib = load_calibration(Path(calib_path))
    counts = torch.zeros(vocab, dtype=torch.int64)
    for i, sample in enumerate(calib.samples()):
        ids = sample.target_next_ids.to(torch.int64).flatten()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise CalibrationDataError(f"sample {i} holds target token ids outside [0, {vocab}) (the draft's target "
                                       "vocabulary): the calibration set is for another target", path=calib_path,
                                       field=f"target_next_ids.{i}")
        counts += torch.bincount(ids, minlength=vocab)
    if not int(counts.sum()):
        raise CalibrationDataError("the calibration set holds no target tokens to rank", path=calib_path)
    return counts


def current_target_ids(draft: DraftCheckpoint) -> torch.Tensor:
    """Target id of every current draft id (identity without d2t)."""

    info = draft.checkpoint.tensors.get("d2t")
    if info is None:
        return torch.arange(draft.config.draft_vocab_size, dtype=torch.int64)
    d2t = info.load().to(torch.int64)
    return torch.arange(d2t.numel(), dtype=torch.int64) + d2t


def choose_vocab(current: torch.Tensor, counts: torch.Tensor, n: int) -> torch.Tensor:
    """Draft ids (into the current vocabulary) of the N kept tokens, in ascending target id."""
    if not 0 < n <= current.numel():
        raise SchemeError(f"--draft-vocab {n} is not in 1..{current.numel()} (the draft's current vocabulary; "
                          "pruning can only keep tokens the draft's lm_head has)", field="draft_vocab")
    # most frequent first; stable sort over ascending target ids breaks ties by the lower id
    by_target = torch.argsort(current, stable=True)
    order = by_target[torch.argsort(-counts[current[by_target]], stable=True)]
    kept = order[:n]
    return kept[torch.argsort(current[kept])]


def prune_vocab(draft: DraftCheckpoint, calib: str | Path, n: int) -> tuple[dict[str, torch.Tensor], dict,
                                                                             VocabPruning]:
    """(tensors, config, record) of the pruned BF16 draft."""
    import hashlib


    counts = target_token_counts(calib, draft.config.vocab_size)
    current = current_target_ids(draft)
    keep = choose_vocab(current, counts, n)
    kept_targets = current[keep]
    tensors = draft.checkpoint.load_tensors()
    tensors["lm_head.weight"] = tensors["lm_head.weight"][keep].contiguous()
    tensors["d2t"] = (kept_targets - torch.arange(n, dtype=torch.int64)).contiguous()
    t2d = torch.zeros(draft.config.vocab_size, dtype=torch.bool)
    t2d[kept_targets] = True
    tensors["t2d"] = t2d
    config = {**draft.config.raw, "draft_vocab_size": n}
    total = int(counts.sum())
    record = VocabPruning(
        calibration=public_name(Path(calib).resolve()), draft_vocab_before=int(current.numel()), draft_vocab=n,
        target_tokens=total, distinct_tokens=int((counts > 0).sum()),
        coverage=int(counts[kept_targets].sum()) / total, coverage_before=int(counts[current].sum()) / total,
        kept_target_ids_sha256=hashlib.sha256(kept_targets.numpy().tobytes()).hexdigest(),
        ranked_tokens=int((counts[current] > 0).sum()))
    return tensors, config, record


@contextmanager
def vocab_pruned(draft: DraftCheckpoint, calib: str | Path, n: int, out: Path) -> Iterator[tuple[Path,
                                                                                                 VocabPruning]]:
    """Write the pruned BF16 draft into a hidden folder beside OUT; yield (folder, record); always remove it."""
    from safetensors.torch import save_file

    from eagle3_quant.quantize.side_files import copy_side_files

    total = draft.checkpoint.total_bytes
    check_disk(out.parent, total, f"the vocabulary-pruned BF16 draft ({gb(total)} at most)")
    check_memory(BASE_BYTES + total + draft.checkpoint.tensors["lm_head.weight"].nbytes,
                 f"pruning the vocabulary (the draft held in memory, {gb(total)})", draft.path)
    tensors, config, record = prune_vocab(draft, calib, n)
    with scratch_for(out, "vocab") as folder:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        del tensors
        (folder / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False) + "\n")
        copy_side_files(draft.path, folder)
        yield folder, record
