"""Read OUT/validation.json defensively: the one place that decides whether a draft may be published.

Contract (report_version 1, written by `eagle3-quant validate`)::

    {"report_version": 1, "passed": bool,
     "checks": [{"name": str, "status": "passed"|"failed"|"skipped", "detail": str, ...}],
     "metrics": {"acceptance_length_bf16": float, "acceptance_length_fp8": float, "acceptance_ratio": float,
                 "top1_agreement": float, "kl": float, ...},          # keys may be missing (data-free run)
     "kernel": {"status": str, "device": str, "backend": str, "kernels": [...]},
     "calibration": {"target": str, ...} | null, ...}

Anything unexpected is read as "not measured", never guessed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from eagle3_quant.evidence import evidence_problem

REPORT_NAME = "validation.json"
REPORT_VERSION = 1

State = Literal["passed", "failed", "missing", "unreadable", "foreign"]   # foreign: another artifact's report


@dataclass(frozen=True)
class CheckLine:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class ValidationSummary:
    """What the validation report says, reduced to what push and the card need."""

    path: Path
    state: State
    problem: str = ""                       # why the state is not "passed", in words
    checks: tuple[CheckLine, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    kernel: dict[str, Any] = field(default_factory=dict)
    target: str | None = None

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    def metric(self, name: str) -> float | None:
        return self.metrics.get(name)


def _finite_numbers(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        return {}
    return {k: float(v) for k, v in raw.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _checks(raw: Any) -> tuple[CheckLine, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(CheckLine(str(c.get("name", "?")), str(c.get("status", "?")), str(c.get("detail", "")))
                 for c in raw if isinstance(c, dict))


def read_validation(out: str | Path, artifact: Mapping[str, str] | None = None) -> ValidationSummary:
    """Never raises for a bad report: the state says what is wrong, and push refuses on anything but passed.

    `artifact` (path -> sha256, see eagle3_quant/evidence.py): the report must name exactly these files, else
    its state is "foreign" and none of its results are read.
    """
    path = Path(out) / REPORT_NAME
    if not path.is_file():
        return ValidationSummary(path, "missing", "no validation report")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return ValidationSummary(path, "unreadable", f"validation report is not valid JSON ({exc})")
    if not isinstance(data, dict):
        return ValidationSummary(path, "unreadable", "validation report is not a JSON object")
    if data.get("report_version") != REPORT_VERSION:
        return ValidationSummary(path, "unreadable", f"unknown report_version {data.get('report_version')!r} "
                                                     f"(this tool reads version {REPORT_VERSION})")
    problem = evidence_problem(data, artifact) if artifact is not None else None
    if problem:
        return ValidationSummary(path, "foreign", problem)
    checks = _checks(data.get("checks"))
    kernel = data.get("kernel") if isinstance(data.get("kernel"), dict) else {}
    calibration = data.get("calibration") if isinstance(data.get("calibration"), dict) else {}
    target = next((t for t in (data.get("target"), calibration.get("target")) if isinstance(t, str) and t), None)
    common = dict(checks=checks, metrics=_finite_numbers(data.get("metrics")), kernel=kernel, target=target)
    if data.get("passed") is not True:
        failed = [c.name for c in checks if c.status == "failed"]
        why = f"failed checks: {', '.join(failed)}" if failed else f"'passed' is {data.get('passed')!r}"
        return ValidationSummary(path, "failed", f"validation did not pass ({why})", **common)
    return ValidationSummary(path, "passed", **common)
