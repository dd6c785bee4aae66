"""What `bench --engine llamacpp` makes of llama.cpp's numbers: acceptance per draft and the paired ratio (the same
statistics as vLLM's, `bench/stats.py`), losslessness with near ties told apart by log-probabilities, speed ratios
with paired bootstrap intervals, and where a speculative step's time goes.

Near ties: llama.cpp verifies k + 1 tokens in one batch and decodes one token at a time without a draft; the two sum
in different orders (fp32, and another matmul kernel for a batch), so a greedy pick between two tokens whose no-draft
log-probabilities lie within `NEAR_TIE_NATS` may flip. Such a first difference is a near tie; any other is real.
"""

from __future__ import annotations

import torch

from eagle3_quant.bench.llamacpp_run import RequestRun
from eagle3_quant.bench.stats import BOOTSTRAP_RESAMPLES, CONFIDENCE, PromptCounts
from eagle3_quant.records.bench_run import FirstDifference, SequencesMatch
from eagle3_quant.records.llamacpp_bench import DraftStep, SpeedRatio, StepCost

NEAR_TIE_NATS = 0.01
SPEED_METHOD = f"paired bootstrap over {{units}} ({BOOTSTRAP_RESAMPLES} resamples), repetitions averaged per unit"


def prompt_counts(runs: list[RequestRun], k: int) -> list[PromptCounts]:
    """Each request's verify steps, accepted tokens and accepted at each position (from /metrics, one slot)."""
    return [PromptCounts(run.steps or 0, run.draft_accepted, tuple(run.accepted_at or (0,) * k)) for run in runs]


def first_difference(prompt: int, output: tuple[int, ...], baseline: tuple[int, ...], top: tuple | None
                     ) -> FirstDifference:
    position = next((j for j, (a, b) in enumerate(zip(output, baseline, strict=False)) if a != b),
                    min(len(output), len(baseline)))
    with_draft = output[position] if position < len(output) else -1
    without = baseline[position] if position < len(baseline) else -1
    probs = dict(top[position]) if top and position < len(top) else {}
    if without not in probs or with_draft not in probs:
        return FirstDifference(prompt, position, without, with_draft, None, None, "real")
    margin = abs(probs[without] - probs[with_draft])
    return FirstDifference(prompt, position, without, with_draft, margin, margin / NEAR_TIE_NATS,
                           "near tie" if margin <= NEAR_TIE_NATS else "real")


def lossless(runs: list[RequestRun], baseline: list[RequestRun]) -> SequencesMatch:
    """Greedy output with a draft against the no-draft one, per prompt, each difference told apart."""
    equal = [a.tokens == b.tokens for a, b in zip(runs, baseline, strict=True)]
    first = next((i for i, same in enumerate(equal) if not same), None)
    differences = tuple(first_difference(i, runs[i].tokens, baseline[i].tokens, baseline[i].top)
                        for i, same in enumerate(equal) if not same)
    real = sum(d.kind == "real" for d in differences)
    return SequencesMatch(real == 0, sum(equal), len(equal), first, len(differences) - real, real, differences)


def speed_ratio(slow: list[list[float]], fast: list[list[float]], units: str, seed: int) -> SpeedRatio:
    """sum(slow) / sum(fast): each unit's seconds averaged over repetitions, units resampled whole, paired."""
    base, other = torch.tensor(slow, dtype=torch.float64), torch.tensor(fast, dtype=torch.float64)
    a, b = base.mean(0), other.mean(0)
    ratio = float(a.sum() / b.sum())
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, a.numel(), (BOOTSTRAP_RESAMPLES, a.numel()), generator=gen)
    boot = a[picks].sum(-1) / b[picks].sum(-1)
    tail = (1 - CONFIDENCE) / 2
    low, high = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    per_repeat = tuple(float(base[r].sum() / other[r].sum()) for r in range(base.shape[0]))
    return SpeedRatio(ratio, low, high, per_repeat, SPEED_METHOD.format(units=units))


def draft_step(runs: list[RequestRun], cost: StepCost, token_ms: float) -> DraftStep:
    steps = sum(r.steps or 0 for r in runs)
    after_first = sum(max(r.predicted_n - 1, 0) for r in runs)
    predicted = sum(r.predicted_ms for r in runs)
    step_ms = predicted / steps if steps else float("nan")
    drafting = [r.draft_ms for r in runs]
    draft_ms = sum(drafting) / steps if steps and all(d is not None for d in drafting) else None
    rest = step_ms - cost.batch_ms - draft_ms if draft_ms is not None else None
    return DraftStep(steps, after_first / steps if steps else float("nan"), step_ms, draft_ms, cost.batch_ms, rest,
                     step_ms / token_ms if token_ms else float("nan"))


def token_ms(runs: list[RequestRun]) -> float:
    """No draft: ms per generated token after the first (llama.cpp's own eval timing)."""
    tokens = sum(max(r.predicted_n - 1, 0) for r in runs)
    return sum(r.predicted_ms for r in runs) / tokens if tokens else float("nan")


def depth(prompts: list[list[int]], max_tokens: int) -> int:
    return int(round(sum(len(p) for p in prompts) / len(prompts) + max_tokens / 2))
