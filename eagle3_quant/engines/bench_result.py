"""What `bench`'s engine child (``vllm/serve_child.py``) returns, checked like any input before it is used: every
field of its RESULT (module docstring there) of the declared type, one entry per prompt, counts non-negative
integers, seconds and rates finite. `result_problem` says what does not fit, in one line (None: it fits); the
caller reports it as the engine's failure."""

from __future__ import annotations

import math
from typing import Any

COUNTER_KEYS = ("drafts", "draft_tokens", "accepted")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _counts(value: Any, length: int | None = None) -> bool:
    return isinstance(value, list) and all(_count(v) for v in value) and (length is None or len(value) == length)


def _op(row: Any) -> bool:
    if not isinstance(row, dict) or not all(isinstance(row.get(key), str) for key in ("why", "with")) \
            or not _count(row.get("calls")) or not _processes(row.get("processes", {}), counted=True):
        return False
    if "compared_calls" not in row:
        return "max_abs_diff" not in row
    return _count(row["compared_calls"]) and _seconds(row.get("max_abs_diff"))


def _processes(value: Any, counted: bool) -> bool:
    """Where a change acted: {process: calls} (counted) or [process, ...]."""
    if counted:
        return isinstance(value, dict) and all(isinstance(k, str) and _count(v) for k, v in value.items())
    return isinstance(value, list) and all(isinstance(k, str) for k in value)


def result_problem(result: Any, prompts: int, k: int, vocab_size: int, sweep: dict | None = None) -> str | None:
    """Why `result` is not a bench child's result for `prompts` prompts with `k` draft tokens (None: it is)."""
    if not isinstance(result, dict):
        return f"the result is a {type(result).__name__}, not an object"
    outputs = result.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != prompts:
        return f"'outputs' is not a list of {prompts} token lists"
    for n, output in enumerate(outputs):
        if not _counts(output) or any(t >= vocab_size for t in output):
            return f"outputs[{n}] is not a list of token ids below {vocab_size}"
    per_request = result.get("per_request")
    if not isinstance(per_request, list) or len(per_request) != prompts:
        return f"'per_request' is not a list of {prompts} entries"
    for n, row in enumerate(per_request):
        if row is None:
            continue
        if not isinstance(row, dict) or not _counts(row.get("histogram")) or len(row["histogram"]) > k + 1 \
                or not _count(row.get("draft_tokens")):
            return f"per_request[{n}] is not {{histogram: at most {k + 1} counts, draft_tokens: a count}}"
    counters = result.get("counters")
    if not isinstance(counters, dict) or not all(_count(counters.get(key)) for key in COUNTER_KEYS) \
            or not _counts(counters.get("accepted_per_position", [])):
        return f"'counters' is not {{{', '.join(COUNTER_KEYS)}: counts, accepted_per_position: counts}}"
    for key in ("load_s", "generate_s"):
        if not _seconds(result.get(key)):
            return f"{key!r} is not a finite number of seconds (got {result.get(key)!r})"
    if not _count(result.get("generated_tokens")):
        return f"'generated_tokens' is not a count (got {result.get('generated_tokens')!r})"
    ops = result.get("substituted_ops", {})
    if not isinstance(ops, dict) or not all(_op(row) for row in ops.values()):
        return ("'substituted_ops' is not {op: {why: text, with: text, calls: a count, compared_calls: a count and "
                "max_abs_diff: a finite number, or neither, processes: {text: a count}}}")
    kernels = result.get("registered_kernels", {})
    if not isinstance(kernels, dict) or not all(isinstance(row, dict) and all(
            isinstance(row.get(key), str) for key in ("kernel_type", "platform", "why"))
            and _processes(row.get("processes", []), counted=False) for row in kernels.values()):
        return "'registered_kernels' is not {kernel: {kernel_type, platform, why: text, processes: [text]}}"
    if "top_logits" in result:
        problem = _top_problem(result["top_logits"], outputs)
        if problem:
            return problem
    if sweep:
        return _sweep_problem(result.get("sweep"), sweep["concurrency"])
    return None


def _top_problem(top: Any, outputs: list) -> str | None:
    if not isinstance(top, list) or len(top) != len(outputs):
        return f"'top_logits' is not a list of {len(outputs)} entries"
    for n, rows in enumerate(top):
        if not isinstance(rows, list) or not all(
                isinstance(row, list) and all(isinstance(pair, list) and len(pair) == 2 and _count(pair[0])
                                              and isinstance(pair[1], int | float) and math.isfinite(pair[1])
                                              for pair in row) for row in rows):
            return f"top_logits[{n}] is not a list of [[token id, finite logit], ...] per generated token"
    return None


def _sweep_problem(rows: Any, levels: list[int]) -> str | None:
    if not isinstance(rows, list) or len(rows) != len(levels):
        return f"'sweep' is not a list of {len(levels)} points"
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("concurrency") != levels[n] or not all(
                row.get(key) is None or _seconds(row.get(key)) for key in ("output_tokens_per_s", "tpot_ms")):
            return f"sweep[{n}] is not {{concurrency: {levels[n]}, output_tokens_per_s, tpot_ms: finite or null}}"
    return None
