"""How numbers read in every view (terminal tables, the model card, messages): a value that may be missing, a 95%
interval, a ratio with its interval, a byte count."""

from __future__ import annotations

NOT_MEASURED = "not measured"      # the model card's text for a number no record holds


def number(value, spec: str, missing: str = "-") -> str:
    """VALUE formatted by SPEC (".3f", ".2%"), or MISSING when there is none."""
    return missing if value is None else format(value, spec)


def interval(low, high) -> str:
    """`0.9812..1.0034`: the two ends of an interval, four decimals; a missing end reads "-"."""
    return f"{number(low, '.4f')}..{number(high, '.4f')}"


def ratio_interval(ratio: float, low, high) -> str:
    """`0.9934 (0.9812..1.0034)`: a ratio and its 95% interval."""
    return f"{ratio:.4f} ({interval(low, high)})"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


def differences_text(match) -> str:
    """A sequences match's differing sequences told apart (a `records.bench_run.SequencesMatch`), or nothing."""
    if not match.near_ties and not match.real_differences:
        return ""
    return f" ({match.near_ties} near ties among the target's top logits, {match.real_differences} real differences)"


def engine_op(name: str) -> str:
    """An engine op as its users know it: vLLM's compiled ops are named bare in records (``_C.`` added here)."""
    return name if "." in name else f"_C.{name}"
