"""What `bench` makes of vLLM's own numbers: acceptance per draft, the artifact/reference ratio with a paired
bootstrap interval over prompts, losslessness of greedy outputs, and tokens/s.

vLLM counts, per verify step, how many of the k drafted tokens were accepted. Its engine-wide counters
(``vllm:spec_decode_num_drafts``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``) give the
acceptance length ``1 + accepted / drafts`` and the per-position rates ``accepted_at_i / drafts``; each request's
``spec_decode_metrics`` histogram (steps by accepted count j) gives the same per prompt, which the bootstrap
resamples. The two are checked against each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from eagle3_quant.records.bench_run import EngineAcceptance, EngineRatio, FirstDifference, SequencesMatch, Speed

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
METHOD = f"paired bootstrap over prompts ({BOOTSTRAP_RESAMPLES} resamples)"


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's verify steps and accepted draft tokens, and its steps whose first i+1 drafts were accepted."""

    drafts: int
    accepted: int
    at_position: tuple[int, ...]


def prompt_counts(per_request: list[dict | None], k: int) -> list[PromptCounts]:
    """From each request's histogram (index j: verify steps with j drafts accepted)."""
    counts = []
    for row in per_request:
        histogram = list((row or {}).get("histogram") or [0] * (k + 1))
        histogram += [0] * (k + 1 - len(histogram))
        counts.append(PromptCounts(sum(histogram), sum(j * n for j, n in enumerate(histogram)),
                                   tuple(sum(histogram[i + 1:]) for i in range(k))))
    return counts


def engine_acceptance(counters: dict, prompts: list[PromptCounts], k: int) -> EngineAcceptance:
    drafts, accepted = int(counters["drafts"]), int(counters["accepted"])
    per_pos = list(counters.get("accepted_per_position") or [])[:k]
    agree = (sum(p.drafts for p in prompts) == drafts and sum(p.accepted for p in prompts) == accepted
             and [sum(p.at_position[i] for p in prompts) for i in range(k)] == per_pos)
    length = 1.0 + accepted / drafts if drafts else float("nan")
    rates = tuple(n / drafts if drafts else float("nan") for n in per_pos)
    return EngineAcceptance(drafts, int(counters["draft_tokens"]), accepted, length, rates, agree,
                            tuple((p.drafts, *p.at_position) for p in prompts))


def _lengths(prompts: list[PromptCounts], picks: torch.Tensor) -> torch.Tensor:
    drafts = torch.tensor([p.drafts for p in prompts], dtype=torch.float64)
    accepted = torch.tensor([p.accepted for p in prompts], dtype=torch.float64)
    return 1.0 + accepted[picks].sum(-1) / drafts[picks].sum(-1)


def paired_ratio(reference: list[PromptCounts], candidate: list[PromptCounts], seed: int = 0) -> EngineRatio:
    """Acceptance length candidate / reference; prompts are resampled whole, the same prompts for both drafts
    (each draft's verify steps differ in number, so each length is recomputed from its own sums)."""
    everything = torch.arange(len(reference))
    ratio = float(_lengths(candidate, everything) / _lengths(reference, everything))
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(reference), (BOOTSTRAP_RESAMPLES, len(reference)), generator=gen)
    boot = _lengths(candidate, picks) / _lengths(reference, picks)
    tail = (1 - CONFIDENCE) / 2
    low, high = torch.quantile(boot, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return EngineRatio(ratio, low, high, CONFIDENCE, METHOD)


NEAR_TIE_STEPS = 2        # a first difference within two steps of the engine dtype at the logits' size: numerics
TOP_LOGITS = 5            # the no-draft run's highest logits kept per generated token, to tell differences apart
MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23}


def dtype_step(value: float, dtype: str) -> float:
    """The spacing of `dtype`'s numbers at |value| (the resolution a logit of that size is computed with)."""
    size = abs(value)
    exponent = math.floor(math.log2(size)) if size > 0 else -126
    return 2.0 ** (exponent - MANTISSA_BITS.get(dtype, 7))


def first_difference(prompt: int, output: list[int], baseline: list[int], top: list | None,
                     dtype: str) -> FirstDifference:
    """Where `output` (with a draft) first parts from `baseline` (without), told apart by the no-draft run's highest
    logits there (`top`: per generated position [[id, logit], ...], highest first)."""
    position = next((j for j, (a, b) in enumerate(zip(output, baseline, strict=False)) if a != b),
                    min(len(output), len(baseline)))
    with_draft = output[position] if position < len(output) else -1
    without = baseline[position] if position < len(baseline) else -1
    logits = {int(token): logit for token, logit in top[position]} if top and position < len(top) else {}
    if without not in logits or with_draft not in logits:
        return FirstDifference(prompt, position, without, with_draft, None, None, "real")
    # the draft run's token against the no-draft run's: within the resolution either is the same number, and the
    # engine's argmax may name either (listed in either order when equal)
    margin = abs(logits[without] - logits[with_draft])
    steps = margin / dtype_step(max(abs(logits[without]), abs(logits[with_draft])), dtype)
    return FirstDifference(prompt, position, without, with_draft, margin, steps,
                           "near tie" if steps <= NEAR_TIE_STEPS else "real")


def lossless(outputs: list[list[int]], baseline: list[list[int]], top: list | None = None,
             dtype: str = "bfloat16") -> SequencesMatch:
    """Greedy output with a draft against the output without one, token for token, per sequence; with the no-draft
    run's top logits (`top`, per prompt), each difference told apart (`first_difference`): only real ones count."""
    equal = [a == b for a, b in zip(outputs, baseline, strict=True)]
    first = next((i for i, same in enumerate(equal) if not same), None)
    if top is None:
        return SequencesMatch(all(equal), sum(equal), len(equal), first)
    differences = tuple(first_difference(i, outputs[i], baseline[i], top[i], dtype)
                        for i, same in enumerate(equal) if not same)
    real = sum(d.kind == "real" for d in differences)
    return SequencesMatch(real == 0, sum(equal), len(equal), first, len(differences) - real, real, differences)


def throughput(run: dict) -> float | None:
    """Generated tokens per second of the generate call (load excluded)."""
    seconds = run.get("generate_s")
    return run["generated_tokens"] / seconds if seconds else None


CPU_SPEED_NOTE = ("not measured on CPU: one unwarmed pass per draft, FP8 emulated; tokens/s and speedups from it "
                  "say nothing about serving speed (run bench on a GPU)")


def speed_section(runs: dict[str, dict], cpu: bool) -> Speed:
    """bench.json's `speed`. On a CPU engine no tokens/s and no speedup are reported: each draft ran one unwarmed
    pass, so the numbers contradict one another (a draft accepting as often as its reference 'faster' than it by
    x7) and mean nothing for serving. On a GPU: generated tokens per second of each run, and over no draft."""
    load = {name: run["load_s"] for name, run in runs.items()}
    if cpu:
        return Speed(False, None, None, load, False, CPU_SPEED_NOTE)
    speed = {name: throughput(run) for name, run in runs.items()}
    base = speed.get("none")
    return Speed(True, speed, {n: speed[n] / base if speed[n] and base else None for n in speed if n != "none"},
                 load, True)
