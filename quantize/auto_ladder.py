"""The candidates of `quantize --scheme auto`, cheapest draft step first.

A candidate is a scheme of the registry (``eagle3_quant/schemes.py``), a draft vocabulary (unchanged, or pruned
to 1/2, 1/3, 1/4 of it where the calibration set ranks that many tokens) and fc's precision (FP8 only where an
engine that serves it loads it: vLLM does, SGLang does not). Which engines may serve a candidate is
``--engine``'s choice (``eagle3_quant/engines/choice.py``): named engines must all load it; with ``auto`` (the
default) one engine that serves the draft's format suffices, and the written candidate's engines are recorded.
``lm_head`` stays BF16: no engine loads a quantized Eagle3 lm_head (``eagle3_quant/lm_head_support.py``). Step
bytes come from ``eagle3_quant/cost.py`` on the draft's headers and the plan ``quantize`` would write. A scheme
joins the ladder by registering, once the cost projection and the simulation know its number format (FP8 E4M3
and MXFP4); one they do not know, or one no engine asked for can serve, is listed in ``skipped`` with the reason.
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
from eagle3_quant.engines.choice import check_choice, choose_engines
from eagle3_quant.errors import SchemeError, UnsupportedSourceError
from eagle3_quant.plan import make_plan
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.schemes import SCHEMES, Scheme

VOCAB_FRACTIONS = (2, 3, 4)             # pruned vocabularies of 1/2, 1/3, 1/4 of the current one
SIMULATED_DTYPES = frozenset({"fp8_e4m3", "fp4", "fp6_e2m3", "fp6_e3m2"})   # schemes.ELEMENT_DTYPES


@dataclass(frozen=True)
class Candidate:
    scheme: str
    draft_vocab: int | None     # None: the draft's vocabulary unchanged
    quantize_fc: bool
    step_bytes: int
    engines: tuple[str, ...] = ()   # the engines its artifact would be for (--engine's choice)

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


def unserved(draft: DraftCheckpoint, engine: str, scheme: Scheme, quantize_fc: bool) -> str | None:
    """Why --engine ENGINE leaves this scheme and fc precision out (None: an engine asked for serves it)."""
    cfg, fmt = draft.config, draft.format
    choice = choose_engines(engine, cfg, fmt, scheme, quantize_fc)
    try:
        check_choice(choice, cfg, fmt, scheme, quantize_fc, draft.path / "config.json")
    except (SchemeError, UnsupportedSourceError) as exc:
        return f"--engine {engine}: {exc.message}"
    return None


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
    fc_left_out = None
    for scheme in schemes if schemes is not None else SCHEMES.values():
        if not simulated(scheme):
            skipped.append(f"{scheme.name}: the simulation knows FP8 E4M3 and MXFP4 (E2M1) only, not "
                           f"{scheme.weight.dtype}")
            continue
        why_not = unserved(draft, engine, scheme, False)
        if why_not:
            skipped.append(f"{scheme.name}: {why_not}")
            continue
        try:
            make_plan(draft, scheme, exclude, False)
        except SchemeError as exc:          # e.g. an MX scheme on a width that is not a multiple of 32
            skipped.append(f"{scheme.name}: {exc.message}")
            continue
        for fc in (False, True):
            left_out = unserved(draft, engine, scheme, True) if fc else None
            if left_out:
                fc_left_out = left_out
                continue
            try:
                plan = make_plan(draft, scheme, exclude, fc, engine=engine)
            except SchemeError as exc:          # --exclude fc with --engine vllm
                skipped.append(f"{scheme.name} + fc FP8: {exc.message}")
                continue
            written = quantize_modules(tensors, [d.module for d in plan.quantized],
                                       per_channel=scheme.weight.granularity == "per_channel",
                                       static_input=not scheme.input.dynamic,
                                       mx_bits=scheme.weight.element_bits if scheme.mx else None)
            engines = plan.engines.engines
            for n in (None, *sizes):
                projected = prune_vocab(written, n) if n is not None else written
                candidates.append(Candidate(scheme.name, n, fc, step_cost(projected, "").total_bytes, engines))
    if fc_left_out:
        skipped.append(f"fc FP8: {fc_left_out}")
    candidates.sort(key=lambda c: (c.step_bytes, c.name))
    return Ladder(step_cost(as_bf16(tensors), "bf16").total_bytes, tuple(candidates), tuple(skipped))
