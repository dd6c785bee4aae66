"""The model card's engine rows: what vLLM's own serving engine measured (`eagle3-quant bench`, the validation
report's ``engine_run``) beside what `validate` predicted offline, each marked with the engine and the device.

Only recorded numbers are shown; a run the report does not hold is "not measured". Tokens/s measured on a CPU are
never shown as a speed: the card says they do not transfer to a GPU.
"""

from __future__ import annotations

from typing import Any

from eagle3_quant.records.bench_run import BenchServeTaps, EngineRun
from eagle3_quant.util.formatting import NOT_MEASURED, differences_text, engine_op, interval


def _num(value: Any, spec: str) -> str | None:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(ends: tuple | None) -> str:
    if ends is None or not all(_num(x, "") for x in ends):
        return ""
    return f" (95% {interval(*ends)})"


def engine_rows(run: EngineRun | None) -> list[tuple[str, str]]:
    """(measure, value) rows: what vLLM measured, the prediction beside it; one "not measured" row without a run."""
    if run is None:
        return [("vLLM engine run", f"{NOT_MEASURED} (run `eagle3-quant bench OUT --target T --prompts P`)")]
    engine, prompts, predicted = run.engine, run.prompts, run.predicted
    guesses = predicted.acceptance_length.to_dict() if predicted else {}
    rows = [("engine", f"{engine.distribution} {engine.version} on {engine.device}, {engine.dtype}, "
                       f"{engine.ran.describe()}; {prompts.count} prompts x {prompts.max_tokens} new tokens, "
                       f"k={run.k}, greedy")]
    if run.target_precision is not None:
        rows.append(("target as served", run.target_precision.describe()))
    for (name, row), label in zip(run.acceptance.items(), ("BF16 draft", "this draft"), strict=True):
        value = _num(row.acceptance_length, ".3f") or NOT_MEASURED
        per_position = " ".join(_num(x, ".3f") or "?" for x in row.per_position)
        guess = _num(guesses.get(name), ".3f")
        rows.append((f"acceptance length, {label} (vLLM)", f"{value} (per position {per_position})"
                     + (f"; validate predicted {guess}" if guess else "")))
    ratio = run.acceptance_ratio
    measured = _num(ratio.ratio, ".4f") or NOT_MEASURED
    guess = _num(predicted.acceptance_ratio, ".4f") if predicted else None
    rows.append(("acceptance ratio this / BF16 (vLLM)", measured + _interval((ratio.low, ratio.high))
                 + (f"; validate predicted {guess}{_interval(predicted.interval)}" if guess else "")))
    rows.extend(_taps_rows(run.serve_taps))
    lossless = run.lossless
    counts = [f"{name} {match.equal_sequences}/{match.sequences}{differences_text(match)}"
              for name, match in lossless.drafts.items()]
    verdict = "yes" if lossless.lossless else "NO"
    rows.append(("lossless: greedy output with the draft equals without it (but for near ties among the "
                 "target's top logits)", f"{verdict} ({', '.join(counts)} sequences)"))
    if run.substituted_ops:
        rows.append(("engine ops done by other code", "; ".join(f"`{engine_op(op)}` ({row.why}): {row.with_}"
                                                                for op, row in run.substituted_ops.items())
                     + "; on this engine build only"))
    if run.registered_kernels:
        rows.append(("kernels registered", ", ".join(f"`{kernel}` ({row.kernel_type}, {row.platform})"
                                                     for kernel, row in run.registered_kernels.items())
                     + ": vLLM's own, for a platform that does not list them"))
    if run.speed.meaningful_for_gpu is False:
        rows.append(("tokens/s, speedup", "not measured on a CPU (one unwarmed pass per draft): not a GPU serving "
                     "speed, not shown"))
    return rows


def _taps_rows(taps: BenchServeTaps | None) -> list[tuple[str, str]]:
    """The BF16 draft as shipped vs given the layer ids `--serve-taps` wrote, both in vLLM's engine."""
    if taps is None:
        return []
    shipped = _num(taps.reference_as_shipped.acceptance_length, ".3f")
    served = _num(taps.reference_as_served.acceptance_length, ".3f")
    gain = _num(taps.gain.ratio, ".3f")
    return [("acceptance length, BF16 draft as shipped / with this draft's layer ids (vLLM)",
             f"{shipped} / {served} = x{gain}{_interval((taps.gain.low, taps.gain.high))}; the ratio above compares "
             "this draft with the BF16 draft given the same ids")]
