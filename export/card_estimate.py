"""The model card's speedup-estimate rows (from OUT/speedup_estimate.json, written by `eagle3-quant estimate`)
and its draft-vocabulary line (from the manifest's ``vocab_pruning``).

The file holds an estimate, and the card says so with every input it was made from; without the file (or with
one that cannot be read) the card says "not measured".
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_quant.speedup import ESTIMATE_NAME
from eagle3_quant.util.formatting import NOT_MEASURED


def estimate_rows(out: Path) -> list[tuple[str, str]]:
    """(measure, value) rows; a single "not measured" row when OUT has no usable estimate."""
    try:
        data = json.loads((out / ESTIMATE_NAME).read_text(encoding="utf-8"))
        k, tokens, verify = int(data["k"]), float(data["tokens_per_round"]), float(data["verify_ms"])
        draft, share, speedup = float(data["draft_ms"]), float(data["verify_share"]), float(data["speedup_vs_no_spec"])
        where, acceptance = str(data["draft_ms_source"]), str(data["acceptance_source"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return [("speedup estimate", f"{NOT_MEASURED} (run `eagle3-quant estimate OUT --verify-ms X`)")]
    vs_bf16 = data.get("speedup_vs_bf16_draft")
    return [
        ("speedup over no speculation (ESTIMATE)", f"{speedup:.2f}x"),
        ("speedup over the BF16 draft (ESTIMATE)",
         f"{float(vs_bf16):.3f}x" if isinstance(vs_bf16, int | float) else NOT_MEASURED),
        (f"inputs: tokens per cycle E (k={k})", f"{tokens:.3f}, from {acceptance}"),
        ("inputs: verify (one target forward)", f"{verify:.3f} ms, given"),
        ("inputs: draft side per cycle", f"{draft:.3f} ms, {where}"),
        ("verify share of the cycle", f"{share:.0%}"),
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
