"""The model card's speedup-estimate rows (from OUT/speedup_estimate.json, written by `eagle3-quant estimate
--write`) and its draft-vocabulary line (from the manifest's ``vocab_pruning``).

The file holds an estimate, and the card says so with every input it was made from; without the file, or with one
made for other files or from another validation report than OUT's (`records/speedup_estimate.py`), the card says
"not measured" and why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from eagle3_quant.records.speedup_estimate import estimate_of
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.util.formatting import NOT_MEASURED


def estimate_rows(out: Path, artifact: Mapping[str, str], report_sha256: str | None,
                  per_position: Sequence[float | None] | None) -> list[tuple[str, str]]:
    """(measure, value) rows; a single "not measured" row when OUT has no estimate of these artifact files made
    from its validation report (sha256 `report_sha256`, FP8 `per_position` acceptance: E = 1 + their sum)."""
    estimate, why = estimate_of(out, artifact, report_sha256)
    rates = [r for r in per_position or () if r is not None][:estimate.k] if estimate else []
    if estimate is not None and not math.isclose(estimate.tokens_per_round, 1 + sum(rates), rel_tol=1e-9):
        estimate, why = None, "its tokens per cycle are not the report's acceptance: estimate again"
    if estimate is None:
        return [("speedup estimate", f"{NOT_MEASURED} ({why})")]
    e = estimate
    vs_bf16 = e.speedup_vs_bf16_draft
    return [
        ("speedup over no speculation (ESTIMATE)", f"{e.speedup_vs_no_spec:.2f}x"),
        ("speedup over the BF16 draft (ESTIMATE)", f"{vs_bf16:.3f}x" if vs_bf16 is not None else NOT_MEASURED),
        (f"inputs: tokens per cycle E (k={e.k})", f"{e.tokens_per_round:.3f}, from {e.acceptance_source}"),
        ("inputs: validation report", f"`{REPORT_NAME}` of this repository, sha256 `{report_sha256[:16]}`"),
        ("inputs: verify (one target forward)", f"{e.verify_ms:.3f} ms, given (`--verify-ms`)"),
        ("inputs: draft side per cycle", f"{e.draft_ms:.3f} ms, {e.draft_ms_source}"),
        ("verify share of the cycle", f"{e.verify_share:.0%}"),
    ]


def vocab_text(pruning: object) -> str | None:
    """One line for a pruned vocabulary; None when the draft's vocabulary was kept."""
    if not isinstance(pruning, dict):
        return None
    try:
        return (f"pruned {int(pruning['draft_vocab_before']):,} -> {int(pruning['draft_vocab']):,} tokens (the ones "
                f"the target emits most often in the calibration set); they cover {float(pruning['coverage']):.2%} "
                f"of its {int(pruning['target_tokens']):,} target tokens (the full vocabulary: "
                f"{float(pruning['coverage_before']):.2%})")
    except (KeyError, TypeError, ValueError):
        return None
