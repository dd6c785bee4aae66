"""The candidates of `quantize --scheme auto`, cheapest draft step first.

A candidate is a scheme of the registry (``eagle3_quant/schemes.py``), a draft vocabulary (unchanged, or pruned
to 1/2, 1/3, 1/4 of it where the calibration set ranks that many tokens) and fc's precision (FP8 only when
every engine asked for loads it: vLLM does, SGLang does not). ``lm_head`` stays BF16: no engine loads a
quantized Eagle3 lm_head (``eagle3_quant/lm_head_support.py``). Step bytes come from ``eagle3_quant/cost.py``
on the draft's headers and the plan ``quantize`` would write. A scheme joins the ladder by registering, once
the cost projection and the simulation know its number format (FP8 E4M3 and MXFP4); one they do not know, or
one an engine asked for cannot load (``Scheme.why_not``), is listed in ``skipped`` with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eagle3_quant.cost import (
    WeightTensor,
    as_bf16,
    prune_vocab,
    quantize_modules,
    step_cost,
)
from eagle3_quant.errors import SchemeError
from eagle3_quant.plan import make_plan
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.schemes import SCHEMES, Scheme, serving_engines

VOCAB_FRACTIONS = (2, 3, 4)             # pruned vocabularies of 1/2, 1/3, 1/4 of the current one
FC_FP8_ENGINES = frozenset({"vllm"})    # SGLang's Eagle3 loader keeps fc a plain nn.Linear (docs/commands.md)
SIMULATED_DTYPES = frozenset({"fp8_e4m3", "fp4", "fp6_e2m3", "fp6_e3m2"})   # schemes.ELEMENT_DTYPES


@dataclass(frozen=True)
class Candidate:
    scheme: str
    draft_vocab: int | None     # None: the draft's vocabulary unchanged
    quantize_fc: bool
    step_bytes: int

    @property
    def name(self) -> str:
        parts = [self.scheme]
        if self.draft_vocab is not None:
            parts.append(f"vocab {self.draft_vocab}")
        if self.quantize_fc:
            parts.append("fc FP8")
        return " + ".join(parts)


@dataclass(frozen=True)
class Ladder:
    bf16_step_bytes: int
    candidates: tuple[Candidate, ...]       # ascending step bytes, ties by name
    skipped: tuple[str, ...] = ()           # what was left out, and why


def simulated(scheme: Scheme) -> bool:
    """Whether the cost projection and the whole-plan simulation know this scheme's number format."""
    return scheme.weight.dtype in SIMULATED_DTYPES and scheme.input.dtype in SIMULATED_DTYPES


def fc_choices(engine: str) -> tuple[bool, ...]:
    return (False, True) if engine in FC_FP8_ENGINES else (False,)


def vocab_sizes(current: int, ranked: int) -> tuple[list[int], list[str]]:
    """(sizes, why others were left out): 1/d of the current vocabulary where the calibration set ranks at
    least that many of its tokens (fewer: the rest would be kept by id alone, not by frequency)."""
    sizes, skipped = [], []
    for d in VOCAB_FRACTIONS:
        n = current // d
        if n < 1 or n in sizes:
            continue
        if n > ranked:
            skipped.append(f"vocab {n}: the calibration set ranks only {ranked} of the draft's {current} tokens")
        else:
            sizes.append(n)
    return sizes, skipped


def header_tensors(draft: DraftCheckpoint) -> list[WeightTensor]:
    return [WeightTensor(name, info.shape, info.dtype) for name, info in sorted(draft.checkpoint.tensors.items())]


def build_ladder(draft: DraftCheckpoint, exclude: Sequence[str], engine: str, sizes: Sequence[int],
                 schemes: Sequence[Scheme] | None = None) -> Ladder:
    tensors = header_tensors(draft)
    skipped = []
    candidates = []
    for scheme in schemes if schemes is not None else SCHEMES.values():
        if not simulated(scheme):
            skipped.append(f"{scheme.name}: the simulation knows FP8 E4M3 and MXFP4 (E2M1) only, not "
                           f"{scheme.weight.dtype}")
            continue
        why_not = [f"{e}: {scheme.why_not(e)}" for e in serving_engines(engine) if scheme.why_not(e)]
        if why_not:
            skipped.append(f"{scheme.name}: --engine {engine} includes {why_not[0]}")
            continue
        try:
            make_plan(draft, scheme, exclude, False)
        except SchemeError as exc:          # e.g. an MX scheme on a width that is not a multiple of 32
            skipped.append(f"{scheme.name}: {exc.message}")
            continue
        for fc in fc_choices(engine):
            try:
                plan = make_plan(draft, scheme, exclude, fc)
            except SchemeError as exc:          # --exclude fc with --engine vllm
                skipped.append(f"{scheme.name} + fc FP8: {exc.message}")
                continue
            written = quantize_modules(tensors, [d.module for d in plan.quantized],
                                       per_channel=scheme.weight.granularity == "per_channel",
                                       static_input=not scheme.input.dynamic,
                                       mx_bits=scheme.weight.element_bits if scheme.mx else None)
            for n in (None, *sizes):
                projected = prune_vocab(written, n) if n is not None else written
                candidates.append(Candidate(scheme.name, n, fc, step_cost(projected, "").total_bytes))
    if engine not in FC_FP8_ENGINES:
        skipped.append(f"fc FP8: --engine {engine} includes SGLang, whose Eagle3 loader drops fc's FP8 scale")
    candidates.sort(key=lambda c: (c.step_bytes, c.name))
    return Ladder(step_cost(as_bf16(tensors), "bf16").total_bytes, tuple(candidates), tuple(skipped))
