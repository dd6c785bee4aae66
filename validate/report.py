"""The validation report as the validate stage builds it: checks, metrics, kernel evidence.

Its file form (name, version, layout) is owned by `eagle3_quant.records.validation_report`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from eagle3_quant.errors import OptionsError
from eagle3_quant.records.manifest import library_versions
from eagle3_quant.records.validation_report import REPORT_NAME, REPORT_VERSION, ValidationMetrics, write_report
from eagle3_quant.scheme_gates import GATE_NAMES, gates_for_scheme
from eagle3_quant.schemes import scheme_label
from eagle3_quant.util.json_values import json_safe

__all__ = ["REPORT_NAME", "REPORT_VERSION", "json_safe"]
from eagle3_quant.records.public_names import public_name

DEFAULT_K = 3                 # draft tokens per speculative step (vLLM num_speculative_tokens)
Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class Gates:
    """Thresholds that make validation fail (exit status 1). A gate left None takes the artifact's scheme default
    (`eagle3_quant.scheme_gates`: FP8's 0.95 / 0.99 / 25 dB, lower top-1 and SQNR gates for MX); a set one wins."""

    # Acceptance is what serving speed depends on; top-1 is a coarser guard. Near-tied logits flip under any
    # rounding: the tiny pair's BF16 draft agrees with itself run in fp32 on only 98.8% of top-1 tokens, and its
    # FP8 draft on 96.7% while keeping 100.2% of the acceptance length. So FP8's top-1 gate is 0.95, not 0.98.
    min_top1_agreement: float | None = None
    min_acceptance_ratio: float | None = None
    min_weight_sqnr_db: float | None = None

    def __post_init__(self) -> None:
        for name, value in self.to_dict().items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise OptionsError(f"gate {name} = {value!r} is not a finite number", field=name)

    def to_dict(self) -> dict:
        return {"min_top1_agreement": self.min_top1_agreement, "min_acceptance_ratio": self.min_acceptance_ratio,
                "min_weight_sqnr_db": self.min_weight_sqnr_db}

    @classmethod
    def from_value(cls, value: Gates | Mapping[str, float] | None) -> Gates:
        """A Gates, a mapping of its fields (pipeline files), or None for the defaults; unknown names refused."""
        if value is None or isinstance(value, Gates):
            return value or cls()
        known = set(cls().to_dict())
        unknown = sorted(set(value) - known)
        if unknown:
            raise OptionsError(f"unknown gate(s) {', '.join(unknown)}; valid gates: {', '.join(sorted(known))}",
                              field="gates")
        return cls(**dict(value))

    def resolve(self, scheme: str | None) -> tuple[Gates, dict[str, str]]:
        """(every gate a number, where each came from): a set gate as given, the others `scheme`'s defaults."""
        defaults = gates_for_scheme(scheme)
        values = {name: getattr(self, name) for name in GATE_NAMES}
        source = {name: "set" if value is not None else f"default for {scheme or 'FP8 (scheme not recorded)'}"
                  for name, value in values.items()}
        return Gates(**{n: v if v is not None else getattr(defaults, n) for n, v in values.items()}), source


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "detail": self.detail, **json_safe(self.data)}


def passed(name: str, detail: str, **data: Any) -> Check:
    return Check(name, "passed", detail, data)


def failed(name: str, detail: str, **data: Any) -> Check:
    return Check(name, "failed", detail, data)


def skipped(name: str, reason: str, **data: Any) -> Check:
    return Check(name, "skipped", reason, data)


def gate(name: str, value: float | None, threshold: float, what: str, *, higher_is_better: bool = True) -> Check:
    if value is None or math.isnan(value):
        return failed(name, f"{what} could not be measured", value=None, threshold=threshold)
    ok = value >= threshold if higher_is_better else value <= threshold
    sign = ">=" if higher_is_better else "<="
    text = f"{what} {value:.4f} ({'meets' if ok else 'misses'} the gate {sign} {threshold})"
    return (passed if ok else failed)(name, text, value=value, threshold=threshold)


@dataclass(frozen=True)
class ValidationReport:
    artifact: Path
    reference: Path | None
    calibration: dict | None
    gates: Gates
    checks: tuple[Check, ...]
    metrics: ValidationMetrics
    layers: tuple[dict, ...]
    kernel: dict[str, Any]
    report_path: Path | None = None
    artifact_files: dict[str, str] = field(default_factory=dict)   # path -> sha256 of what was validated
    gate_source: dict[str, str] = field(default_factory=dict)      # gate -> "set" or "default for SCHEME"
    label: str = field(default_factory=lambda: scheme_label(None))  # the artifact's linears in tables: "MXFP4 E2M1"

    @property
    def passed(self) -> bool:
        return not any(c.status == "failed" for c in self.checks)

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "failed")

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "report_version": REPORT_VERSION,
            "passed": self.passed,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "artifact": public_name(self.artifact),
            "artifact_files": dict(self.artifact_files),
            "reference": public_name(self.reference),
            "calibration": self.calibration,
            "gates": self.gates.to_dict(),
            "gate_source": dict(self.gate_source),
            "checks": [c.to_dict() for c in self.checks],
            "metrics": self.metrics.to_dict(),
            "layers": [json_safe(layer) for layer in self.layers],
            "kernel": json_safe(self.kernel),
            "versions": library_versions(),
        }

    def write(self, path: Path) -> Path:
        return write_report(path, self.to_dict())
