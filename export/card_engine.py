"""The model card's engine rows: what vLLM's own serving engine measured (`eagle3-quant bench`, the validation
report's ``engine_run``) beside what `validate` predicted offline, each marked with the engine and the device.

Only recorded numbers are shown; a run the report does not hold is "not measured". Tokens/s measured on a CPU are
never shown as a speed: the card says they do not transfer to a GPU.
"""

from __future__ import annotations

from typing import Any

from eagle3_quant.util.formatting import NOT_MEASURED, interval


def _num(value: Any, spec: str) -> str | None:
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(row: Any) -> str:
    ends = row.get("interval") if isinstance(row, dict) else None
    if not (isinstance(ends, list) and len(ends) == 2 and all(_num(x, "") for x in ends)):
        return ""
    return f" (95% {interval(*ends)})"


def engine_rows(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(measure, value) rows: what vLLM measured, the prediction beside it; one "not measured" row without a run."""
    try:
        engine, acceptance, ratio = run["engine"], run["acceptance"], run["acceptance_ratio"]
        where = f"{engine['distribution']} {engine['version']} on {engine['device']}, {engine['dtype']}"
        prompts = run["prompts"]
    except (KeyError, TypeError):
        return [("vLLM engine run", f"{NOT_MEASURED} (run `eagle3-quant bench OUT --target T --prompts P`)")]
    predicted = run.get("predicted") if isinstance(run.get("predicted"), dict) else {}
    predicted_length = predicted.get("acceptance_length") or {}
    lossless = run.get("lossless") or {}
    rows = [("engine", f"{where}; {prompts.get('count')} prompts x {prompts.get('max_tokens')} new tokens, "
                       f"k={run.get('k')}, greedy")]
    for name, label in (("reference", "BF16 draft"), ("artifact", "this draft")):
        row = acceptance.get(name) or {}
        value = _num(row.get("acceptance_length"), ".3f") or NOT_MEASURED
        per_position = " ".join(_num(x, ".3f") or "?" for x in row.get("per_position") or [])
        guess = _num(predicted_length.get(name), ".3f")
        rows.append((f"acceptance length, {label} (vLLM)", f"{value} (per position {per_position})"
                     + (f"; validate predicted {guess}" if guess else "")))
    measured = _num(ratio.get("ratio"), ".4f") or NOT_MEASURED
    guess = _num(predicted.get("acceptance_ratio"), ".4f")
    rows.append(("acceptance ratio this / BF16 (vLLM)", measured + _interval(ratio)
                 + (f"; validate predicted {guess}{_interval(predicted)}" if guess else "")))
    rows.extend(_taps_rows(run.get("serve_taps")))
    counts = [f"{name} {lossless[name].get('equal_sequences')}/{lossless[name].get('sequences')}"
              for name in ("reference", "artifact") if isinstance(lossless.get(name), dict)]
    if counts:
        verdict = "yes" if lossless.get("lossless") else "NO"
        rows.append(("greedy output with the draft equals without it", f"{verdict} ({', '.join(counts)} sequences)"))
    ops = run.get("substituted_ops") or {}
    if ops:
        rows.append(("ops supplied in torch", ", ".join(f"`_C.{op}` ({row.get('why')})" for op, row in ops.items())
                     + ": the CUDA kernels' math, on this engine build only"))
    speed = run.get("speed") or {}
    if speed.get("meaningful_for_gpu") is False:
        rows.append(("tokens/s, speedup", "not measured on a CPU (one unwarmed pass per draft): not a GPU serving "
                     "speed, not shown"))
    return rows


def _taps_rows(taps: Any) -> list[tuple[str, str]]:
    """The BF16 draft as shipped vs given the layer ids `--serve-taps` wrote, both in vLLM's engine."""
    try:
        shipped = _num(taps["reference_as_shipped"]["acceptance_length"], ".3f")
        served = _num(taps["reference_as_served"]["acceptance_length"], ".3f")
        gain = _num(taps["gain"]["ratio"], ".3f")
    except (KeyError, TypeError):
        return []
    return [("acceptance length, BF16 draft as shipped / with this draft's layer ids (vLLM)",
             f"{shipped} / {served} = x{gain}{_interval(taps['gain'])}; the ratio above compares this draft with "
             "the BF16 draft given the same ids")]
