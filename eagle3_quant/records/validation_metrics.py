"""`validation.json`'s ``metrics``: one typed record, every field checked when read (an error names the file and the
dotted field), written back as it was read, byte for byte. Its owner is `records/validation_report.py`, which
re-exports it; nothing outside `records/` reads the metrics by their keys.

Every field is optional: a measurement that was not made is absent (or null where it could not be computed, as the
KL between pruned and full vocabularies), never estimated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ValidationRecordError
from eagle3_quant.records.fields import RecordFields

Numbers = tuple[float | None, ...]
AGREE = 1e-6        # measured numbers written at full precision agree with each other to far better than this


def _fields(data: Any, path: Path | None, at: str) -> RecordFields:
    if not isinstance(data, dict):
        raise ValidationRecordError("is not an object", path=path, field=at)
    return RecordFields(data, path, at, ValidationRecordError)


def _number(f: RecordFields, key: str) -> float | None:
    return f.number(key) if f.has(key) else None


def _integer(f: RecordFields, key: str) -> int | None:
    return f.optional_integer(key) if f.has(key) else None


def _text(f: RecordFields, key: str) -> str | None:
    return f.optional_text(key) if f.has(key) else None


def _numbers(f: RecordFields, key: str) -> Numbers | None:
    return f.optional_numbers(key) if f.has(key) else None


def _integers(f: RecordFields, key: str) -> tuple[int, ...] | None:
    value = f.data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise f.fail(key, "a list of integers")
    return tuple(value)


def _texts(f: RecordFields, key: str) -> tuple[str, ...]:
    value = f.data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise f.fail(key, "a list of strings")
    return tuple(value)


@dataclass(frozen=True)
class WalkMetrics:
    """The prediction counted over the chains vLLM's decoding walk drafts (``metrics.engine_walk``)."""

    acceptance_length_bf16: float | None = None
    acceptance_length_fp8: float | None = None
    drafts_bf16: int | None = None
    drafts_fp8: int | None = None
    per_position_acceptance_bf16: Numbers | None = None
    per_position_acceptance_fp8: Numbers | None = None
    acceptance_ratio: float | None = None
    acceptance_ratio_interval: tuple[float | None, float | None] | None = None

    @classmethod
    def read(cls, f: RecordFields) -> WalkMetrics:
        return cls(_number(f, "acceptance_length_bf16"), _number(f, "acceptance_length_fp8"),
                   _integer(f, "drafts_bf16"), _integer(f, "drafts_fp8"), _numbers(f, "per_position_acceptance_bf16"),
                   _numbers(f, "per_position_acceptance_fp8"), _number(f, "acceptance_ratio"),
                   f.interval("acceptance_ratio_interval"))


@dataclass(frozen=True)
class PredictionNumerics:
    """The serving numerics the acceptance was predicted with (``metrics.prediction``, runtime/serving.py)."""

    engine: str | None = None
    compute_dtype: str | None = None
    dtype_reason: str | None = None

    @classmethod
    def read(cls, f: RecordFields) -> PredictionNumerics:
        return cls(_text(f, "engine"), _text(f, "compute_dtype"), _text(f, "dtype_reason"))

    def text(self, fallback_dtype: str | None = None) -> str:
        """"vllm's numerics in bfloat16"; "computed in DTYPE" without an engine; "" when neither is known."""
        dtype = self.compute_dtype or fallback_dtype
        if not dtype:
            return ""
        return f"{self.engine}'s numerics in {dtype}" if self.engine else f"computed in {dtype}"


@dataclass(frozen=True)
class TapsMeasured:
    """The acceptance `validate` measured with one candidate set of target layers fed (metrics.taps.measured)."""

    name: str
    indices: tuple[int, ...]
    fed_by: tuple[str, ...]                 # readers (vllm, vllm_v2, sglang) that feed it as the config stands
    acceptance_length_bf16: float | None
    acceptance_length_fp8: float | None
    drafts: int | None = None
    per_position_fp8: Numbers = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "indices": list(self.indices), "fed_by": list(self.fed_by), "drafts": self.drafts,
                "acceptance_length_bf16": self.acceptance_length_bf16,
                "acceptance_length_fp8": self.acceptance_length_fp8, "per_position_fp8": list(self.per_position_fp8)}

    @classmethod
    def read(cls, f: RecordFields) -> TapsMeasured:
        return cls(f.text("name"), _integers(f, "indices") or (), _texts(f, "fed_by"),
                   _number(f, "acceptance_length_bf16"), _number(f, "acceptance_length_fp8"), _integer(f, "drafts"),
                   _numbers(f, "per_position_fp8") or ())


@dataclass(frozen=True)
class TapsMetrics:
    """Trained layers against served ones, and the acceptance under each candidate (``metrics.taps``)."""

    training: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()
    measured: tuple[TapsMeasured, ...] = ()
    best: str | None = None
    target_layers: int | None = None

    @classmethod
    def read(cls, f: RecordFields) -> TapsMetrics:
        rows = f.data.get("measured") or []
        if not isinstance(rows, list):
            raise f.fail("measured", "a list of objects")
        measured = tuple(TapsMeasured.read(_fields(row, f.path, f.name(f"measured.{i}")))
                         for i, row in enumerate(rows))
        return cls(_integers(f, "training"), _texts(f, "notes"), measured, _text(f, "best"),
                   _integer(f, "target_layers"))


@dataclass(frozen=True)
class ValidationMetrics:
    """What `validate` measured on calibration data (see `records/validation_report.py` for the layout)."""

    k: int | None = None
    drafts: int | None = None                       # chains evaluated
    positions: float | None = None
    top1_agreement: float | None = None
    kl: float | None = None
    acceptance_length_bf16: float | None = None
    acceptance_length_fp8: float | None = None
    per_position_acceptance_bf16: Numbers | None = None
    per_position_acceptance_fp8: Numbers | None = None
    acceptance_ratio: float | None = None
    acceptance_ratio_interval: tuple[float | None, float | None] | None = None
    acceptance_ratio_confidence: float | None = None
    acceptance_ratio_method: str | None = None
    engine_walk: WalkMetrics | None = None
    compute_dtype: str | None = None
    device: str | None = None
    aux_layer_ids: tuple[int, ...] | None = None
    prediction: PredictionNumerics | None = None
    min_weight_sqnr_db: float | None = None
    taps: TapsMetrics | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)   # as read: written back as is

    @classmethod
    def read(cls, data: Any, path: Path | None = None) -> ValidationMetrics:
        """Every field checked; a wrong one is a `ValidationRecordError` naming the file and the dotted field."""
        f = _fields(data, path, "metrics")
        walk, prediction, taps = (f.optional_object(key) if f.has(key) else None
                                  for key in ("engine_walk", "prediction", "taps"))
        return cls(_integer(f, "k"), _integer(f, "drafts"), _number(f, "positions"), _number(f, "top1_agreement"),
                   _number(f, "kl"), _number(f, "acceptance_length_bf16"), _number(f, "acceptance_length_fp8"),
                   _numbers(f, "per_position_acceptance_bf16"), _numbers(f, "per_position_acceptance_fp8"),
                   _number(f, "acceptance_ratio"), f.interval("acceptance_ratio_interval"),
                   _number(f, "acceptance_ratio_confidence"), _text(f, "acceptance_ratio_method"),
                   WalkMetrics.read(walk) if walk else None, _text(f, "compute_dtype"), _text(f, "device"),
                   _integers(f, "aux_layer_ids"), PredictionNumerics.read(prediction) if prediction else None,
                   _number(f, "min_weight_sqnr_db"), TapsMetrics.read(taps) if taps else None, dict(data))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)

    def acceptance_problem(self) -> tuple[str, str] | None:
        """(field, why) when the acceptance numbers disagree with each other, as no measurement can (a hand edit):
        per-position rates that rise (rate j is the share of chains whose first j+1 steps were all accepted), or
        an acceptance length other than 1 + their sum; None when they agree."""
        for side in ("fp8", "bf16"):
            rates, length = getattr(self, f"per_position_acceptance_{side}"), getattr(self, f"acceptance_length_{side}")
            if not rates or any(r is None for r in rates):
                continue
            if any(later > earlier + AGREE for earlier, later in zip(rates, rates[1:], strict=False)):
                return f"metrics.per_position_acceptance_{side}", "rises from one position to the next: not measured"
            if length is not None and abs(length - 1 - sum(rates)) > AGREE:
                return (f"metrics.acceptance_length_{side}", f"{length} is not 1 + the sum of "
                        f"per_position_acceptance_{side} ({1 + sum(rates):.6f}): not measured")
        return None

    @property
    def measured_offline(self) -> bool:
        """The FP8 acceptance and its ratio to the BF16 draft were measured (on a calibration set)."""
        return self.acceptance_length_fp8 is not None and self.acceptance_ratio is not None

    @property
    def prediction_record(self) -> dict[str, Any] | None:
        """``prediction`` whole, as written (what a bench record's prediction keeps)."""
        value = self.raw.get("prediction")
        return dict(value) if isinstance(value, dict) else None

    @property
    def prediction_text(self) -> str:
        return (self.prediction or PredictionNumerics()).text(self.compute_dtype)
