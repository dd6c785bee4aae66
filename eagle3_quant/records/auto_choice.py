"""The manifest's record of `quantize --scheme auto`: every candidate of the ladder, what it costs, how well it
drafts, why it was or was not measured, and which one was written."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ManifestError
from eagle3_quant.util.formatting import number, ratio_interval

# the interval's lower bound keeps --min-acceptance-ratio, and validate's gates of the scheme hold on the same set
GATE_RULE = "lower"
KEPT = "kept"
NOT_MEASURED = "not measured: a cheaper candidate kept the gate"


@dataclass(frozen=True)
class AutoCandidateRecord:
    name: str                          # "ptpc_fp8 + vocab 256 + fc quantized"
    scheme: str
    draft_vocab: int | None            # None: the draft's vocabulary unchanged
    quantize_fc: bool
    step_bytes: int                    # weight bytes one draft step reads (eagle3_quant/cost.py)
    step_bytes_over_bf16: float
    acceptance_ratio: float | None     # acceptance length candidate / BF16 draft; None: not measured or measurable
    interval: list[float] | None       # [low, high], paired bootstrap over samples
    coverage: float | None             # pruned: share of the calibration set's target tokens kept
    keeps_gate: bool
    chosen: bool
    engines: list[str] | None = None   # the engines its artifact is for (None: recorded before --engine auto)
    status: str | None = None          # kept, missed: GATE, not measured: WHY, left out: WHY (None: older record)
    top1_agreement: float | None = None        # step-0 top-1 agreement with the BF16 draft, as validate gates it
    min_weight_sqnr_db: float | None = None    # lowest weight SQNR of the linears it quantizes
    native_devices: list[str] | None = None    # device profiles whose kernels run its GEMM natively

    @property
    def measured(self) -> bool:
        """Judged: drafted, or stopped on its weights alone (a weight SQNR under its scheme's gate)."""
        return self.acceptance_ratio is not None or (self.status or "").startswith("missed")


@dataclass(frozen=True)
class AutoChoiceRecord:
    min_acceptance_ratio: float
    gate: str                          # "lower" (GATE_RULE); older records "point": the ratio itself
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
    device_profile: str | None = None  # --device-profile: only the schemes that device runs natively were measured
    measure_all: bool = False          # --measure-all: every candidate measured (else cheapest first, up to a keeper)
    samples: int | None = None         # calibration samples the ratios were measured on

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
            rows = [AutoCandidateRecord(**_present(AutoCandidateRecord, row)) for row in data["candidates"]]
            fields = _present(cls, data)
            if not isinstance(fields.get("prediction"), dict):
                fields.pop("prediction", None)
            record = cls(**{**fields, "candidates": rows})
        except (KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"incomplete ({exc})", path=path, field="auto_choice") from None
        if sum(c.chosen for c in rows) != 1 or not any(c.name == record.chosen and c.chosen for c in rows):
            raise ManifestError(f"chosen {record.chosen!r} is not the one candidate marked chosen", path=path,
                                field="auto_choice.chosen")
        return record


def _present(cls: type, data: dict) -> dict[str, Any]:
    """The fields of `cls` in `data`: every required one (a KeyError names a missing one), the optional ones that
    an older record may lack only where present."""
    return {f.name: data[f.name] for f in dataclasses.fields(cls)
            if f.name in data or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)}


def format_ratio(candidate: AutoCandidateRecord) -> str:
    if candidate.acceptance_ratio is None or math.isnan(candidate.acceptance_ratio):
        return "-" if candidate.status and not candidate.status.startswith(("kept", "missed")) else "n/a"
    low, high = candidate.interval or (math.nan, math.nan)
    return ratio_interval(candidate.acceptance_ratio, low, high)


def gate_text(candidate: AutoCandidateRecord) -> str:
    return candidate.status or (KEPT if candidate.keeps_gate else "missed")


def native_text(devices: list[str] | None) -> str:
    """The device profiles a row's GEMM runs natively on: "every profile", their names, "none", or "-" (an older
    record)."""
    from eagle3_quant.schemes import DEVICE_PROFILE_NAMES

    if devices is None:
        return "-"
    return "every profile" if set(devices) == set(DEVICE_PROFILE_NAMES) else ", ".join(devices) or "none"


def table_rows(record: AutoChoiceRecord) -> list[tuple[str, ...]]:
    """candidate, step bytes, of BF16, acceptance ratio (95% interval), top-1, coverage, native on, engines, gate,
    chosen: strings."""
    return [(c.name, f"{c.step_bytes:,}", f"{c.step_bytes_over_bf16:.3f}", format_ratio(c),
             number(c.top1_agreement, ".3f"), number(c.coverage, ".2%"),
             native_text(c.native_devices),
             ", ".join(c.engines) if c.engines is not None else "-", gate_text(c), "chosen" if c.chosen else "")
            for c in record.candidates]


TABLE_HEADER = ("candidate", "step bytes", "of BF16", "acceptance ratio (95% CI)", "top-1", "coverage", "native on",
                "engines", "gate", "")
