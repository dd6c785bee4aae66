"""Which engines an artifact is for: `--engine auto` (the default) takes every engine whose code can serve this
draft's format, the scheme and fc's precision; a named engine (`vllm`, `sglang`, `both`) must serve it or the
request is refused, in one line naming the engine and why.

Three things rule an engine out, each read from the engine's own code: the draft's format (`draft_support.py`),
the scheme (`Scheme.why_not`: the engine's Quark loader has no linear scheme for it) and an FP8 `fc`
(SGLang 0.5.23's Eagle3 loader keeps `fc` a plain `nn.Linear`: it casts an FP8 weight and drops its scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.draft_support import ENGINE_NAMES, check_draft_engines, engine_refusals
from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.schemes import AUTO_ENGINE, ENGINES, Scheme, check_engines, serving_engines

FC_FP8_ENGINES = frozenset({"vllm"})     # SGLang's Eagle3 loader keeps fc a plain nn.Linear (docs/commands.md)


def fc_fp8_reason(engine: str) -> str | None:
    if engine in FC_FP8_ENGINES:
        return None
    return (f"{ENGINE_NAMES[engine]} cannot load fc in FP8 (--quantize-fc): its Eagle3 loader keeps fc a plain "
            "nn.Linear, casts the FP8 weight and drops fc's scale")


@dataclass(frozen=True)
class EngineChoice:
    requested: str                            # --engine as given: auto, both, vllm or sglang
    engines: tuple[str, ...]                  # the engines the artifact is for
    left_out: tuple[tuple[str, str], ...]     # (engine, why the artifact is not for it), one line each

    def describe(self) -> str:
        """e.g. `vLLM 0.33 (SGLang 0.5.23 left out: SGLang 0.5.23 refuses model_type: ...)`."""
        served = ", ".join(ENGINE_NAMES[e] for e in self.engines) or "no engine"
        if not self.left_out:
            return served
        return f"{served} ({'; '.join(f'{ENGINE_NAMES[e]} left out: {why}' for e, why in self.left_out)})"

    def to_dict(self) -> dict:
        return {"requested": self.requested, "serves": list(self.engines), "left_out": dict(self.left_out)}


def _reasons(cfg: DraftConfig, fmt: DraftFormat, scheme: Scheme | None, quantize_fc: bool) -> dict[str, str]:
    """engine -> the first reason it cannot serve this draft as asked (absent: it can)."""
    reasons: dict[str, str] = {}
    for refusal in engine_refusals(cfg, fmt):
        reasons.setdefault(refusal.engine, refusal.line())
    for engine in ENGINES:
        why = scheme.why_not(engine) if scheme is not None else None
        if why:
            reasons.setdefault(engine, f"{ENGINE_NAMES[engine]} cannot load scheme {scheme.name}: {why}")
        if quantize_fc and fc_fp8_reason(engine):
            reasons.setdefault(engine, fc_fp8_reason(engine))
    return reasons


def choose_engines(requested: str, cfg: DraftConfig, fmt: DraftFormat, scheme: Scheme | None = None,
                   quantize_fc: bool = False) -> EngineChoice:
    """The engines an artifact of this draft, scheme (None: not chosen yet) and fc precision is for. Never raises:
    `check_choice` refuses what cannot be served."""
    reasons = _reasons(cfg, fmt, scheme, quantize_fc)
    if requested == AUTO_ENGINE:
        engines = tuple(e for e in ENGINES if e not in reasons)
    else:
        engines = serving_engines(requested)
    left_out = tuple((e, reasons.get(e) or f"not asked for (--engine {requested})") for e in ENGINES
                     if e not in engines)
    return EngineChoice(requested, engines, left_out)


def check_named_engines(requested: str, scheme: Scheme | None, quantize_fc: bool) -> None:
    """What a named engine cannot load, refused before the draft is read: the scheme, an FP8 fc."""
    if requested == AUTO_ENGINE:
        return
    engines = serving_engines(requested)
    if scheme is not None:
        check_engines(scheme, engines)
    for engine in engines if quantize_fc else ():
        if fc_fp8_reason(engine):
            raise SchemeError(fc_fp8_reason(engine), field="quantize_fc",
                              hint=f"--engine {AUTO_ENGINE} or vllm serves it")


def check_choice(choice: EngineChoice, cfg: DraftConfig, fmt: DraftFormat, scheme: Scheme | None,
                 quantize_fc: bool, path: Path | str) -> None:
    """Refuse, in one line, a named engine that cannot serve the artifact, or `auto` when no engine can."""
    if choice.requested != AUTO_ENGINE:
        check_draft_engines(cfg, fmt, choice.engines, path)
        check_named_engines(choice.requested, scheme, quantize_fc)
        return
    if choice.engines:
        return
    if all(any(r.engine == e for r in engine_refusals(cfg, fmt)) for e in ENGINES):
        check_draft_engines(cfg, fmt, ENGINES, path)          # the draft's format alone: no engine builds it
    why = [reason for _, reason in choice.left_out]
    raise SchemeError("no engine can serve this draft as asked: " + "; ".join(why), path=path,
                      field="quantize_fc" if any("--quantize-fc" in r for r in why) else "scheme")
