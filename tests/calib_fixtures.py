"""A tiny target embedding and a calibration set built in code, for static FP8 and sensitivity tests."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter


def write_target(folder: Path, vocab: int = 512, hidden: int = 64, seed: int = 0) -> Path:
    """A target checkpoint folder holding what a draft borrows: model.embed_tokens.weight (plus one other)."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"model.embed_tokens.weight": (torch.randn(vocab, hidden, generator=gen) * 0.5).to(torch.bfloat16),
               "model.norm.weight": torch.ones(hidden, dtype=torch.bfloat16)}, folder / "model.safetensors")
    return folder


def write_calibration(folder: Path, target: Path, *, samples: int = 6, seq_len: int = 24, vocab: int = 512,
                      target_hidden: int = 64, seed: int = 0, outlier_scale: float = 8.0) -> Path:
    """Random aux states with a few large channels (like real hidden states) and random token ids."""
    gen = torch.Generator().manual_seed(seed)
    outliers = torch.randperm(3 * target_hidden, generator=gen)[:6]
    info = CalibrationInfo(target=str(target), aux_layer_ids=(1, 2, 3), target_hidden_size=target_hidden,
                           source="tests")
    writer = CalibrationWriter(folder, info, shard_samples=4)
    for i in range(samples):
        length = seq_len - (i % 3)
        aux = torch.randn(length, 3 * target_hidden, generator=gen)
        aux[:, outliers] *= outlier_scale
        ids = torch.randint(0, vocab, (length,), generator=gen)
        writer.add(CalibrationSample(ids, aux.to(torch.bfloat16), torch.roll(ids, -1)))
    writer.flush()
    return folder


@torch.no_grad()
def compare_drafts(base, other, cal: Path) -> tuple[float, float]:
    """(top-1 disagreement, mean KL(base || other)) of two runtime drafts on a calibration set's positions."""
    from eagle3_quant.quantize.calibration import calibration_batches
    from eagle3_quant.records.calibration import load_calibration

    differ = positions = 0
    kl = 0.0
    for batch in calibration_batches(load_calibration(cal), "cpu"):
        p = torch.log_softmax(base(batch["input_ids"], batch["aux_hidden_states"])[0].float(), -1)
        q = torch.log_softmax(other(batch["input_ids"], batch["aux_hidden_states"])[0].float(), -1)
        differ += int((p.argmax(-1) != q.argmax(-1)).sum())
        kl += float((p.exp() * (p - q)).sum())
        positions += p.shape[1]
    return differ / positions, kl / positions
