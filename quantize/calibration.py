"""What static FP8 and sensitivity share: checking a calibration set against a draft, the embedding the
draft reads it with, and the batches aligned as vLLM feeds the draft (see ``eagle3_quant/records/calibration.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from eagle3_quant.errors import DraftFormatError, Eagle3QuantError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.layout import EMBEDDING_NAMES
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.util.progress import Progress

# Draft steps run from every calibration position when observing activations: vLLM's usual
# num_speculative_tokens for Eagle3 drafts, so later steps (fed the draft's own hidden) are covered too.
CALIBRATION_STEPS = 3


def check_calibration(draft: DraftCheckpoint, calib: CalibrationSet,
                      taps: tuple[int, ...] | None = None) -> CalibrationSet:
    """The set, checked against the draft, as the draft reads it: the layers `taps` (what the artifact is served
    with), else the trained ones or vLLM's (``taps/calibration_view.py``), out of the union a set may store."""
    from eagle3_quant.taps.calibration_view import draft_view

    check_calibration_size(draft, calib)
    return draft_view(calib, draft.config, taps, "the artifact is served", trust_unrecorded=True)


def check_calibration_size(draft: DraftCheckpoint, calib: CalibrationSet) -> None:
    """The set's states are as wide as the draft's fc reads per layer, and it holds samples."""
    if calib.info.target_hidden_size != draft.config.target_hidden_size:
        raise DraftFormatError(f"calibration hidden states are {calib.info.target_hidden_size} wide per layer, the "
                               f"draft's fc expects target_hidden_size {draft.config.target_hidden_size}",
                               path=calib.path, field="info.target_hidden_size")
    if calib.num_samples == 0:
        raise DraftFormatError("the calibration set holds no samples", path=calib.path)
    calib.check_token_ids(draft.config.vocab_size, "the draft's target")   # the embedding rows the ids index


def calibration_embedding(draft: DraftCheckpoint, calib: CalibrationSet) -> torch.Tensor | None:
    """None when the draft has its own embedding; else the target's, found through the set's info.target."""
    if any(name in draft.checkpoint.tensors for name in EMBEDDING_NAMES):
        return None
    from eagle3_quant.runtime.embedding import read_target_embedding

    try:
        return read_target_embedding(calib.info.target)
    except Eagle3QuantError as exc:
        raise DraftFormatError(f"the draft has no embedding and the target's could not be read ({exc.message})",
                               path=calib.path, field="info.target",
                               hint="the calibration set must name the target's folder or Hub id") from exc


def batch_positions(batches: list[dict[str, torch.Tensor]]) -> int:
    """Draft positions the batches hold (each run for CALIBRATION_STEPS steps)."""
    return sum(int(b["input_ids"].numel()) for b in batches)


def calibration_batches(calib: CalibrationSet, device: str | torch.device, with_targets: bool = False,
                        max_samples: int | None = None) -> list[dict[str, torch.Tensor]]:
    """One batch per sample: ``input_ids`` [1, T-1], ``aux_hidden_states`` [1, T-1, 3Ht] (the draft's forward
    arguments), plus ``targets`` [1, T-1] (the target's token where the draft predicts) when asked."""
    from eagle3_quant.runtime.drafting import draft_inputs

    batches = []
    for i, sample in enumerate(calib.samples()):
        if max_samples is not None and len(batches) >= max_samples:
            break
        sample.check(calib.info.target_hidden_size, f"{calib.path} sample {i}", len(calib.info.aux_layer_ids))
        if sample.input_ids.numel() < 2:
            continue
        ids, aux, targets = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        batch = {"input_ids": ids.to(device), "aux_hidden_states": aux.to(device)}
        if with_targets:
            batch["targets"] = targets.to(device)
        batches.append(batch)
    return batches


@contextmanager
def counted_forwards(model: torch.nn.Module, progress: Progress, name: str, total: int) -> Iterator[None]:
    """A progress task advanced by each forward of `model` on one calibration batch (one sample, its positions the
    tokens): how Quark's calibration loop and GPTQ's rollouts, which report nothing, are counted."""
    with progress.task(name, total, unit="samples") as advance:
        def count(_module, _args, kwargs):
            advance(1, int(kwargs["input_ids"].numel()) if "input_ids" in kwargs else 0)
        handle = model.register_forward_pre_hook(count, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()
