"""The candidates of `quantize --scheme auto`, cheapest draft step first.

A candidate is a scheme of the registry (``eagle3_quant/schemes.py``), a draft vocabulary (unchanged, or pruned
to 1/2, 1/3, 1/4 of it where the calibration set ranks that many tokens) and fc's precision (FP8 only where an
engine that serves it loads it: vLLM does, SGLang does not). Which engines may serve a candidate is
``--engine``'s choice (``eagle3_quant/engines/choice.py``): named engines must all load it; with ``auto`` (the
default) one engine that serves the draft's format suffices, and the written candidate's engines are recorded.
``lm_head`` stays BF16: no engine loads a quantized Eagle3 lm_head (``eagle3_quant/lm_head_support.py``). Step
bytes come from ``eagle3_quant/cost.py`` on the draft's headers and the plan ``quantize`` would write. Every
scheme of the registry joins; one no engine asked for can serve, or whose groups do not divide the draft's widths,
is listed in ``skipped`` with the reason. With a device profile (``eagle3_quant/devices.py``) a candidate whose
scheme that device does not run natively stays in the table, left out with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eagle3_quant.cost import WeightTensor, as_bf16, project_scheme, prune_vocab, step_cost
from eagle3_quant.devices import DeviceProfile, not_native
from eagle3_quant.engines.choice import check_choice, choose_engines
from eagle3_quant.errors import SchemeError, UnsupportedSourceError
from eagle3_quant.plan import make_plan
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.schemes import SCHEMES, Scheme

VOCAB_FRACTIONS = (2, 3, 4)             # pruned vocabularies of 1/2, 1/3, 1/4 of the current one


@dataclass(frozen=True)
class Candidate:
    scheme: str
    draft_vocab: int | None     # None: the draft's vocabulary unchanged
    quantize_fc: bool
    step_bytes: int
    engines: tuple[str, ...] = ()   # the engines its artifact would be for (--engine's choice)
    native_devices: tuple[str, ...] = ()    # device profiles whose kernels run its GEMM natively
    left_out: str | None = None     # why --device-profile leaves it out (None: measured when its turn comes)

    @property
    def name(self) -> str:
        parts = [self.scheme]
        if self.draft_vocab is not None:
            parts.append(f"vocab {self.draft_vocab}")
        if self.quantize_fc:
            parts.append("fc quantized")
        return " + ".join(parts)


@dataclass(frozen=True)
class Ladder:
    bf16_step_bytes: int
    candidates: tuple[Candidate, ...]       # ascending step bytes, ties by name
    skipped: tuple[str, ...] = ()           # what was left out, and why


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
                 schemes: Sequence[Scheme] | None = None, profile: DeviceProfile | None = None) -> Ladder:
    tensors = header_tensors(draft)
    skipped = []
    candidates = []
    fc_left_out = None
    for scheme in schemes if schemes is not None else SCHEMES.values():
        why_not = unserved(draft, engine, scheme, False)
        if why_not:
            skipped.append(f"{scheme.name}: {why_not}")
            continue
        try:
            make_plan(draft, scheme, exclude, False)
        except SchemeError as exc:          # e.g. an MX scheme on a width that is not a multiple of 32
            skipped.append(f"{scheme.name}: {exc.message}")
            continue
        left_out = not_native(scheme, profile) if profile is not None else None
        for fc in (False, True):
            fc_unserved = unserved(draft, engine, scheme, True) if fc else None
            if fc_unserved:
                fc_left_out = fc_unserved
                continue
            try:
                plan = make_plan(draft, scheme, exclude, fc, engine=engine)
            except SchemeError as exc:          # --exclude fc with --engine vllm
                skipped.append(f"{scheme.name} + fc quantized: {exc.message}")
                continue
            written = project_scheme(tensors, scheme.name, [d.module for d in plan.quantized])
            if sizes and scheme.rounding == "awq" and not fc:     # said once per scheme
                skipped.append(f"{scheme.name} with a smaller vocabulary: AWQ, its rounding, scales the draft of "
                               "the full vocabulary (quantize refuses --draft-vocab with it)")
            for n in (None, *(sizes if scheme.rounding != "awq" else ())):
                projected = prune_vocab(written, n) if n is not None else written
                candidates.append(Candidate(scheme.name, n, fc, step_cost(projected, "").total_bytes,
                                            plan.engines.engines, scheme.native_devices, left_out))
    if fc_left_out:
        skipped.append(f"fc quantized: {fc_left_out}")
    candidates.sort(key=lambda c: (c.step_bytes, c.name))
    return Ladder(step_cost(as_bf16(tensors), "bf16").total_bytes, tuple(candidates), tuple(skipped))
