"""Simulated acceptance of greedy draft chains against the target's own next tokens, and a candidate draft
run against its reference on a calibration set (``calibration_fidelity``): shared by `validate` and by
`quantize --scheme auto`.

Alignment is the calibration set's (``eagle3_quant/records/calibration.py``): the chain started at position t reads
the token at t+1, and its step j (0-based) proposes the token at t+2+j, which the target predicted as
``target_next_ids[t+1+j]``. Under greedy verification the target accepts the leading steps that equal its
own tokens; the chain's outcome is known only where the sample is the target's greedy continuation, i.e.
``input_ids[t+1+i] == target_next_ids[t+i]`` for i = 1..k-1 (what an accepted step fed back is the token
that is really there). Starts without that are not counted (real text rarely has it; generated text always).

Acceptance length as vLLM reports it: ``1 + accepted / drafts``; per-position rate j: the share of chains
whose first j+1 steps were all accepted.

Two ways to pick the chains: every valid start (the default; the most chains, the tightest interval), or the
starts vLLM's engine drafts from when it decodes the sample (``engine_walk``: the first chain at the last
prompt position, each next one past the tokens the previous chain got accepted plus the target's bonus
token). The engine counts the second: on the tiny pair the walk predicts vLLM's own acceptance length and
ratios, where every start gives a different mix of positions (docs/validation.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from eagle3_quant.runtime.drafting import draft_inputs
from eagle3_quant.runtime.model import Eagle3Draft
from eagle3_quant.util.progress import Advance

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


def engine_walk(proposals: torch.Tensor, target_next_ids: torch.Tensor, starts: torch.Tensor, first: int,
                ) -> torch.Tensor:
    """Accepted steps of the chains vLLM drafts decoding this sample: from `first` (the last prompt position),
    each next chain starts past the accepted tokens and the bonus token; the walk ends where no whole chain can
    be judged (the sample's end, or its text stops being the target's greedy text)."""
    counts = torch.full((len(starts),), -1, dtype=torch.long)
    counts[starts] = accepted_counts(proposals, target_next_ids, starts)
    walked, t = [], first
    while 0 <= t < len(starts) and bool(starts[t]):
        walked.append(int(counts[t]))
        t += walked[-1] + 1
    return torch.tensor(walked, dtype=torch.long)


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
    """Samples are resampled whole (chains of one sample are correlated); both drafts see the same resample.
    Each draft's acceptance length counts its own chains (an engine walk drafts a different number)."""
    ref_sizes = torch.tensor([len(c) for c in reference], dtype=torch.float64)
    cand_sizes = torch.tensor([len(c) for c in candidate], dtype=torch.float64)
    ref = torch.tensor([float(c.sum()) for c in reference], dtype=torch.float64) + ref_sizes
    cand = torch.tensor([float(c.sum()) for c in candidate], dtype=torch.float64) + cand_sizes
    ratio = float((cand.sum() / cand_sizes.sum()) / (ref.sum() / ref_sizes.sum()))
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(ref_sizes), (BOOTSTRAP_RESAMPLES, len(ref_sizes)), generator=gen)
    boot = (cand[picks].sum(1) / cand_sizes[picks].sum(1)) / (ref[picks].sum(1) / ref_sizes[picks].sum(1))
    tail = (1 - confidence) / 2
    low, high = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return PairedRatio(ratio, low, high, confidence, BOOTSTRAP_RESAMPLES)


class CalibrationSample(Protocol):
    input_ids: torch.Tensor
    aux_hidden_states: torch.Tensor
    target_next_ids: torch.Tensor
    generated_from: int | None          # the first generated position (the prompt's length); None: no generation


class CalibrationSamples(Protocol):
    """What the fidelity run reads of a calibration set (``records.calibration.CalibrationSet``)."""

    def samples(self) -> Iterable[CalibrationSample]: ...


@dataclass(frozen=True)
class Walked:
    """Both drafts' chains as vLLM's engine walks the samples (`engine_walk`)."""

    reference: AcceptanceStats
    candidate: AcceptanceStats
    ratio: PairedRatio | None

    def metrics(self) -> dict:
        m = {"acceptance_length_bf16": self.reference.acceptance_length,
             "acceptance_length_fp8": self.candidate.acceptance_length,
             "drafts_bf16": self.reference.drafts, "drafts_fp8": self.candidate.drafts,
             "per_position_acceptance_bf16": list(self.reference.per_position),
             "per_position_acceptance_fp8": list(self.candidate.per_position)}
        if self.ratio is not None:
            m.update({"acceptance_ratio": self.ratio.ratio, "acceptance_ratio_interval": [self.ratio.low,
                                                                                        self.ratio.high]})
        return m


@dataclass(frozen=True)
class Fidelity:
    positions: int
    top1_agreement: float
    kl: float
    reference: AcceptanceStats
    candidate: AcceptanceStats
    ratio: PairedRatio | None
    walked: Walked | None = None        # None: no sample records where its generation starts

    def metrics(self) -> dict:
        m = {"k": self.reference.k, "drafts": self.reference.drafts, "positions": self.positions,
             "top1_agreement": self.top1_agreement, "kl": self.kl,
             "acceptance_length_bf16": self.reference.acceptance_length,
             "acceptance_length_fp8": self.candidate.acceptance_length,
             "per_position_acceptance_bf16": list(self.reference.per_position),
             "per_position_acceptance_fp8": list(self.candidate.per_position)}
        if self.ratio is not None:
            m.update({"acceptance_ratio": self.ratio.ratio,
                      "acceptance_ratio_interval": [self.ratio.low, self.ratio.high],
                      "acceptance_ratio_confidence": self.ratio.confidence,
                      "acceptance_ratio_method": self.ratio.to_dict()["method"]})
        if self.walked is not None:
            m["engine_walk"] = self.walked.metrics()
        return m


@torch.no_grad()
def calibration_fidelity(candidate: Eagle3Draft, reference: Eagle3Draft, calib: CalibrationSamples, k: int,
                         max_samples: int | None = None, advance: Advance | None = None) -> Fidelity:
    """Both drafts on every calibration sample: step-0 logits compared at every position, and greedy k-step
    chains judged against the target's next tokens on the same starts (`advance`: called per sample)."""
    device = reference.fc.weight.device
    agree = kl_sum = positions = 0.0
    accepted_ref, accepted_cand, walked_ref, walked_cand = [], [], [], []
    for index, sample in enumerate(calib.samples()):
        if max_samples is not None and index >= max_samples:
            break
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        ids, aux = ids.to(device), aux.to(device)
        ref = reference.propose_all(ids, aux, k, return_logits=True)
        cand = candidate.propose_all(ids, aux, k, return_logits=True)
        if ref.logits.shape[-1] == cand.logits.shape[-1]:
            log_ref = torch.log_softmax(ref.logits[0, :, 0].float(), dim=-1)
            log_cand = torch.log_softmax(cand.logits[0, :, 0].float(), dim=-1)
            kl_sum += float((log_ref.exp() * (log_ref - log_cand)).sum())
            agree += float((log_ref.argmax(-1) == log_cand.argmax(-1)).sum())
        else:   # a pruned vocabulary: no KL between different supports; top-1 compared as target ids
            kl_sum = math.nan
            agree += float((ref.target_ids[0, :, 0] == cand.target_ids[0, :, 0]).sum())
        positions += ref.target_ids.shape[1]
        starts = valid_starts(sample.input_ids, sample.target_next_ids, k)
        accepted_ref.append(accepted_counts(ref.target_ids[0].cpu(), sample.target_next_ids, starts))
        accepted_cand.append(accepted_counts(cand.target_ids[0].cpu(), sample.target_next_ids, starts))
        if sample.generated_from:
            first = sample.generated_from - 1
            walked_ref.append(engine_walk(ref.target_ids[0].cpu(), sample.target_next_ids, starts, first))
            walked_cand.append(engine_walk(cand.target_ids[0].cpu(), sample.target_next_ids, starts, first))
        if advance is not None:
            advance(1, int(ref.target_ids.shape[1]))
    ref_stats, cand_stats = acceptance_stats(accepted_ref, k), acceptance_stats(accepted_cand, k)
    ratio = paired_ratio(accepted_ref, accepted_cand) if ref_stats.drafts else None
    walked = None
    if any(len(w) for w in walked_ref):
        walked = Walked(acceptance_stats(walked_ref, k), acceptance_stats(walked_cand, k),
                        paired_ratio(walked_ref, walked_cand))
    return Fidelity(int(positions), agree / positions if positions else math.nan,
                    kl_sum / positions if positions else math.nan, ref_stats, cand_stats, ratio, walked)


@dataclass(frozen=True)
class Chains:
    """One draft's greedy chains over a calibration set, per sample: the step-0 target id at every position (what
    `calibration_fidelity`'s top-1 agreement compares) and the accepted steps of every valid chain start."""

    first: list[torch.Tensor]
    accepted: list[torch.Tensor]


@torch.no_grad()
def draft_chains(draft: Eagle3Draft, calib: CalibrationSamples, k: int, max_samples: int | None = None,
                 on_sample: Callable[[], None] | None = None, start: int = 0) -> Chains:
    """The chains of `calibration_fidelity` for one draft, so that a reference drafted once pairs with many
    candidates (``paired_ratio``, ``top1_agreement``): the same starts, counts and step-0 ids as there. Samples
    `start` up to `max_samples` (an index, not a count)."""
    device = draft.fc.weight.device
    first, accepted = [], []
    for index, sample in enumerate(calib.samples()):
        if max_samples is not None and index >= max_samples:
            break
        if index < start:
            continue
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        proposal = draft.propose_all(ids.to(device), aux.to(device), k)
        starts = valid_starts(sample.input_ids, sample.target_next_ids, k)
        first.append(proposal.target_ids[0, :, 0].cpu())
        accepted.append(accepted_counts(proposal.target_ids[0].cpu(), sample.target_next_ids, starts))
        if on_sample is not None:
            on_sample()
    return Chains(first, accepted)


def chain_acceptance(draft: Eagle3Draft, calib: CalibrationSamples, k: int,
                     max_samples: int | None = None) -> list[torch.Tensor]:
    """Accepted steps per valid chain start, one tensor per sample (`draft_chains`' accepted)."""
    return draft_chains(draft, calib, k, max_samples).accepted


def first_samples(chains: Chains, count: int) -> Chains:
    """The chains of the first `count` samples (to pair with a candidate measured on those only)."""
    return Chains(chains.first[:count], chains.accepted[:count])


def joined(head: Chains, tail: Chains) -> Chains:
    return Chains([*head.first, *tail.first], [*head.accepted, *tail.accepted])


def top1_upper_bound(reference: Chains, candidate: Chains, confidence: float = 0.95, seed: int = 0) -> float:
    """The upper end of top-1 agreement's bootstrap interval over samples (resampled whole, as `paired_ratio`)."""
    agree = torch.tensor([float((r == c).sum()) for r, c in zip(reference.first, candidate.first, strict=True)],
                         dtype=torch.float64)
    positions = torch.tensor([float(len(r)) for r in reference.first], dtype=torch.float64)
    if not positions.sum():
        return math.nan
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(positions), (BOOTSTRAP_RESAMPLES, len(positions)), generator=gen)
    boot = agree[picks].sum(1) / positions[picks].sum(1).clamp(min=1)
    return float(torch.quantile(boot, torch.tensor(1 - (1 - confidence) / 2, dtype=torch.float64)))


def top1_agreement(reference: Chains, candidate: Chains) -> float:
    """Share of positions whose step-0 token (a target id) the two drafts agree on: `calibration_fidelity`'s
    top-1 agreement (equal argmax of equal vocabularies, else equal target ids)."""
    agree = sum(int((r == c).sum()) for r, c in zip(reference.first, candidate.first, strict=True))
    positions = sum(len(r) for r in reference.first)
    return agree / positions if positions else math.nan
