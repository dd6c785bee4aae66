"""The manifest's record of `quantize --scheme auto`: every candidate of the ladder, what it costs, how well it
drafts, and which one was written."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ManifestError
from eagle3_quant.util.formatting import number, ratio_interval

GATE_RULE = "point"     # the acceptance ratio's point estimate is gated, as `validate` gates it


@dataclass(frozen=True)
class AutoCandidateRecord:
    name: str                          # "ptpc_fp8 + vocab 256 + fc FP8"
    scheme: str
    draft_vocab: int | None            # None: the draft's vocabulary unchanged
    quantize_fc: bool
    step_bytes: int                    # weight bytes one draft step reads (eagle3_quant/cost.py)
    step_bytes_over_bf16: float
    acceptance_ratio: float | None     # acceptance length candidate / BF16 draft; None: not measurable
    interval: list[float] | None       # [low, high], paired bootstrap over samples
    coverage: float | None             # pruned: share of the calibration set's target tokens kept
    keeps_gate: bool
    chosen: bool
    engines: list[str] | None = None   # the engines its artifact is for (None: recorded before --engine auto)


@dataclass(frozen=True)
class AutoChoiceRecord:
    min_acceptance_ratio: float
    gate: str                          # "point": ratio >= min_acceptance_ratio; the interval is reported
    engine: str                        # --engine: auto, both, vllm or sglang (which candidates could be served)
    k: int
    calibration: str
    drafts: int                        # chains judged per candidate
    acceptance_length_bf16: float
    bf16_step_bytes: int
    candidates: list[AutoCandidateRecord]
    chosen: str
    seconds: float
    skipped: list[str]                 # what the ladder left out, and why
    prediction: dict[str, Any] | None = None   # the serving numerics measured in (runtime/serving.py); older: None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def chosen_candidate(self) -> AutoCandidateRecord:
        return next(c for c in self.candidates if c.name == self.chosen)

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> AutoChoiceRecord:
        if not isinstance(data, dict) or not isinstance(data.get("candidates"), list):
            raise ManifestError("not an object with a candidates list", path=path, field="auto_choice")
        try:
            rows = [AutoCandidateRecord(**{k: row[k] for k in AutoCandidateRecord.__dataclass_fields__
                                           if k != "engines" or k in row}) for row in data["candidates"]]
            fields = {k: data[k] for k in cls.__dataclass_fields__ if k != "prediction"}
            prediction = data.get("prediction") if isinstance(data.get("prediction"), dict) else None
            record = cls(**{**fields, "candidates": rows, "prediction": prediction})
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"incomplete ({exc})", path=path, field="auto_choice") from None
        if sum(c.chosen for c in rows) != 1 or not any(c.name == record.chosen and c.chosen for c in rows):
            raise ManifestError(f"chosen {record.chosen!r} is not the one candidate marked chosen", path=path,
                                field="auto_choice.chosen")
        return record


def format_ratio(candidate: AutoCandidateRecord) -> str:
    if candidate.acceptance_ratio is None or math.isnan(candidate.acceptance_ratio):
        return "n/a"
    low, high = candidate.interval or (math.nan, math.nan)
    return ratio_interval(candidate.acceptance_ratio, low, high)


def table_rows(record: AutoChoiceRecord) -> list[tuple[str, ...]]:
    """candidate, step bytes, of BF16, acceptance ratio (95% interval), coverage, gate, engines, chosen: strings."""
    return [(c.name, f"{c.step_bytes:,}", f"{c.step_bytes_over_bf16:.3f}", format_ratio(c),
             number(c.coverage, ".2%"), "kept" if c.keeps_gate else "missed",
             ", ".join(c.engines) if c.engines is not None else "-", "chosen" if c.chosen else "")
            for c in record.candidates]


TABLE_HEADER = ("candidate", "step bytes", "of BF16", "acceptance ratio (95% CI)", "coverage", "gate", "engines",
                "")
