"""Simulated acceptance of greedy draft chains against the target's own next tokens.

Alignment is the calibration set's (``calib/format.py``): the chain started at position t reads the token
at t+1, and its step j (0-based) proposes the token at t+2+j, which the target predicted as
``target_next_ids[t+1+j]``. Under greedy verification the target accepts the leading steps that equal its
own tokens; the chain's outcome is known only where the sample is the target's greedy continuation, i.e.
``input_ids[t+1+i] == target_next_ids[t+i]`` for i = 1..k-1 (what an accepted step fed back is the token
that is really there). Starts without that are not counted (real text rarely has it; generated text always).

Acceptance length as vLLM reports it: ``1 + accepted / drafts``; per-position rate j: the share of chains
whose first j+1 steps were all accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

BOOTSTRAP_RESAMPLES = 2000


def valid_starts(input_ids: torch.Tensor, target_next_ids: torch.Tensor, k: int) -> torch.Tensor:
    """bool [T-1]: chain starts t whose k steps are all judged by tokens the sample really holds."""
    t_len = input_ids.shape[0]
    starts = torch.zeros(max(t_len - 1, 0), dtype=torch.bool)
    last = t_len - 1 - k          # step k-1 compares target_next[t + k]
    if last < 0:
        return starts
    greedy = torch.zeros(t_len, dtype=torch.bool)
    greedy[1:] = input_ids[1:] == target_next_ids[:-1]       # greedy[p]: token p is the target's own choice
    ok = torch.ones(last + 1, dtype=torch.bool)
    for i in range(1, k):
        ok &= greedy[1 + i:1 + i + last + 1]
    starts[: last + 1] = ok
    return starts


def accepted_counts(proposals: torch.Tensor, target_next_ids: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """Accepted steps per valid start. proposals: target ids [T-1, k], chain t at row t."""
    k = proposals.shape[1]
    index = torch.nonzero(starts).flatten()
    wanted = torch.stack([target_next_ids[index + 1 + j] for j in range(k)], dim=1)
    hits = proposals[index] == wanted
    return hits.long().cumprod(dim=1).sum(dim=1)


@dataclass(frozen=True)
class AcceptanceStats:
    k: int
    drafts: int                          # chains evaluated (spec steps)
    acceptance_length: float             # 1 + mean accepted
    per_position: tuple[float, ...]      # rate of chains with steps 0..j all accepted

    def to_dict(self) -> dict:
        return {"k": self.k, "drafts": self.drafts, "acceptance_length": self.acceptance_length,
                "per_position_acceptance": list(self.per_position)}


def acceptance_stats(per_sample: Sequence[torch.Tensor], k: int) -> AcceptanceStats:
    counts = torch.cat(list(per_sample)) if per_sample else torch.zeros(0, dtype=torch.long)
    n = int(counts.numel())
    if n == 0:
        return AcceptanceStats(k, 0, float("nan"), tuple(float("nan") for _ in range(k)))
    rates = tuple(float((counts >= j + 1).double().mean()) for j in range(k))
    return AcceptanceStats(k, n, 1.0 + float(counts.double().mean()), rates)


@dataclass(frozen=True)
class PairedRatio:
    """FP8 / BF16 acceptance length on the same chain starts, with a bootstrap interval over samples."""

    ratio: float
    low: float
    high: float
    confidence: float
    resamples: int

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "interval": [self.low, self.high], "confidence": self.confidence,
                "method": f"paired bootstrap over samples ({self.resamples} resamples)"}


def paired_ratio(reference: Sequence[torch.Tensor], candidate: Sequence[torch.Tensor], confidence: float = 0.95,
                 seed: int = 0) -> PairedRatio:
    """Samples are resampled whole (chains of one sample are correlated); both drafts see the same resample."""
    sizes = torch.tensor([len(c) for c in reference], dtype=torch.float64)
    ref = torch.tensor([float(c.sum()) for c in reference], dtype=torch.float64) + sizes
    cand = torch.tensor([float(c.sum()) for c in candidate], dtype=torch.float64) + sizes
    ratio = float(cand.sum() / ref.sum())
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(sizes), (BOOTSTRAP_RESAMPLES, len(sizes)), generator=gen)
    boot = cand[picks].sum(1) / ref[picks].sum(1)
    tail = (1 - confidence) / 2
    low, high = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return PairedRatio(ratio, low, high, confidence, BOOTSTRAP_RESAMPLES)
