"""`validation.json`: the one owner of its name, version and layout; writing it, and reading it defensively
(the one place that decides whether a draft may be published).

Layout (``report_version`` 1), written by `eagle3-quant validate`::

    {
      "report_version": 1,
      "passed": bool,                        # no check failed (skipped checks do not fail a report)
      "created_at": "2025-01-01T00:00:00+00:00",
      "artifact": "OUT",                     # the FP8 draft validated (folder name: never a local path)
      "artifact_files": {"model.safetensors": "<sha256>", ...},   # what was validated (records/evidence.py)
      "reference": "SRC" | null,             # the BF16 draft it was compared with (folder name or Hub id)
      "calibration": {"path", "samples", "tokens", "target"} | null,   # names, not local paths
      "gates": {"min_top1_agreement": 0.95, "min_acceptance_ratio": 0.99, "min_weight_sqnr_db": 25.0},
      "gate_source": {"min_top1_agreement": "set" | "default for SCHEME", ...},   # eagle3_quant/scheme_gates.py
      "checks": [{"name", "status": "passed" | "failed" | "skipped", "detail", ...}],   # vllm_load, sglang_load:
                                             # see validate/vllm_load.py, validate/sglang_load.py
      "metrics": {
        "acceptance_length_bf16", "acceptance_length_fp8",   # 1 + mean accepted, greedy chains of k steps
        "acceptance_ratio",                                  # fp8 / bf16 on the same chain starts
        "acceptance_ratio_interval", "acceptance_ratio_confidence", "acceptance_ratio_method",
        "per_position_acceptance_bf16", "per_position_acceptance_fp8",   # vLLM's per-position rates
        "k", "drafts",                                       # steps per chain, chains evaluated
        "top1_agreement", "kl",                              # step-0 logits, every calibration position
        "engine_walk": {"acceptance_length_bf16", "acceptance_length_fp8", "drafts_bf16", "drafts_fp8",
                        "per_position_acceptance_bf16", "per_position_acceptance_fp8",
                        "acceptance_ratio", "acceptance_ratio_interval"},   # the chains vLLM's engine drafts
                                             # when it decodes the samples (runtime/acceptance.engine_walk)
        "positions", "min_weight_sqnr_db",
        "compute_dtype", "device",                           # what the two drafts were computed in, and where
        "prediction": {"engine", "compute_dtype", "dtype_reason", "silu_mul", "fused_shards"},
                                             # the serving numerics followed (eagle3_quant/runtime/serving.py)
        "taps": {"training", "vllm", "sglang", "feeds", "measured", "best", "notes": [...]}  # taps/summary.py
      },
      "layers": [{"module", "role", "shape", "sqnr_db"}],    # per quantized linear (needs the reference)
      "kernel": {"status", "device", "platform", "backend", "kernels": [...], ...},   # see kernel_check.py
      "versions": {"eagle3-quant", "torch", ...},
      "engine_run": {...}                    # optional: `eagle3-quant bench` (records/bench_run.py `EngineRun`),
                                             # vLLM's own acceptance, ratio, lossless, prediction; kept (or taken
                                             # from OUT/bench.json) when validate writes a report for the same files
    }

A measurement that was not made is absent or null, never estimated; the check that needed it says
``skipped`` and why. Status ``skipped`` never counts as ``passed``.
Anything unexpected is read as "not measured", never guessed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from eagle3_quant.errors import BenchRecordError, ValidationRecordError
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.records.bench_run import EngineRun, measured_bench
from eagle3_quant.records.llamacpp_bench import measured_llamacpp
from eagle3_quant.records.validation_metrics import (  # noqa: F401 - this file's record, owned here
    PredictionNumerics,
    TapsMeasured,
    TapsMetrics,
    ValidationMetrics,
    WalkMetrics,
)

REPORT_NAME = "validation.json"
REPORT_VERSION = 1
ENGINE_RUN = "engine_run"

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
    metrics: ValidationMetrics = field(default_factory=ValidationMetrics)
    kernel: dict[str, Any] = field(default_factory=dict)
    target: str | None = None
    taps_notes: tuple[str, ...] = ()        # serving engines that feed other layers than the draft was trained on
    taps_measured: tuple[TapsMeasured, ...] = ()   # acceptance under each candidate set of layers
    taps_best: str | None = None            # the candidate the FP8 artifact drafts best with
    gates: str = ""                         # the gates applied and where each came from, in words
    engine_run: EngineRun | None = None     # `bench`: vLLM's own measurement, as recorded
    prediction: str = ""                    # the numerics the acceptance was predicted with, in words

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    @property
    def headline(self) -> str:
        """The card's one line on validation: passed, failed (why), or not validated (why)."""
        if self.state == "passed":
            return f"`eagle3-quant validate` passed; the full report is `{REPORT_NAME}` in this repository."
        if self.state == "failed":
            return f"**Validation FAILED** ({self.problem})."
        return f"**Not validated**: no passing validation report: {self.problem}."


def _finite_numbers(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        return {}
    return {k: float(v) for k, v in raw.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _gates_text(gates: Any, source: Any) -> str:
    """"min_top1_agreement >= 0.9 (default for SCHEME), ..." from the report; "" when it records no gates."""
    values = _finite_numbers(gates)
    source = source if isinstance(source, dict) else {}
    return ", ".join(f"{name} >= {value:g}" + (f" ({source[name]})" if isinstance(source.get(name), str) else "")
                     for name, value in values.items())


def _checks(raw: Any) -> tuple[CheckLine, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(CheckLine(str(c.get("name", "?")), str(c.get("status", "?")), str(c.get("detail", "")))
                 for c in raw if isinstance(c, dict))


def evidence_problem(report: Mapping[str, Any], expected: Mapping[str, str]) -> str | None:
    """Why this report is not evidence for the artifact whose files are `expected` (None when it is)."""
    files = report.get("artifact_files")
    named = report.get("artifact")
    which = f" (it names artifact {named!r})" if isinstance(named, str) else ""
    if not isinstance(files, dict) or not files:
        return f"the validation report does not name the files it validated{which}: validate this folder again"
    if dict(files) != dict(expected):
        differ = sorted(p for p in set(files) | set(expected) if files.get(p) != expected.get(p))
        return (f"the validation report belongs to another artifact{which}: its sha256 differ for "
                f"{', '.join(differ[:3])}; validate this folder again")
    return None


def _engine_run(data: dict[str, Any], path: Path) -> EngineRun | None:
    """The report's engine run, None when it has none or one that does not read (never guessed)."""
    if data.get(ENGINE_RUN) is None:
        return None
    try:
        return EngineRun.from_dict(data[ENGINE_RUN], path)
    except BenchRecordError:
        return None


def _engine_run_for(path: Path, files: Any) -> EngineRun | None:
    """An engine run already measured for these artifact files: the previous report's, else OUT's bench record."""
    previous = _read_json(path)
    run = _engine_run(previous, path)
    if run is not None and previous.get("artifact_files") == files:
        return run
    bench = measured_bench(path.parent, files) if isinstance(files, dict) else None
    return bench.engine_run() if bench is not None else None


def prediction_text(prediction: Any, compute_dtype: Any = None) -> str:
    """"vllm's numerics in bfloat16" from a ``prediction`` record (eagle3_quant/runtime/serving.py: a manifest's
    auto choice or serve taps keep one too); "computed in DTYPE" from a record made before it; "" when neither says."""
    prediction = prediction if isinstance(prediction, dict) else {}
    engine, dtype = prediction.get("engine"), prediction.get("compute_dtype") or compute_dtype
    return PredictionNumerics(engine if isinstance(engine, str) else None,
                              dtype if isinstance(dtype, str) else None).text()


def write_report(path: Path, data: dict[str, Any]) -> Path:
    """Atomic (temp file, then rename) and strict JSON: a non-finite number is a bug, not a value. An engine run
    measured for the same artifact files (the report at `path` had it, or bench.json beside it holds it) is kept:
    `validate` after `bench` does not drop it."""
    if ENGINE_RUN not in data and data.get("artifact_files"):
        run = _engine_run_for(path, data["artifact_files"])
        data = {**data, ENGINE_RUN: run.to_dict()} if run else data
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = load_json_file(path, ValidationRecordError)
    except (OSError, ValidationRecordError):
        return {}
    return data if isinstance(data, dict) else {}


def record_engine_run(out: str | Path, engine_run: EngineRun, artifact: Mapping[str, str]) -> str | None:
    """Put `bench`'s engine run into OUT's validation report; None when done, else why not (no report, or a
    report about other files than `artifact`, path -> sha256): the run is then only in bench.json."""
    path = Path(out) / REPORT_NAME
    data = _read_json(path)
    if not data:
        return f"OUT has no readable {REPORT_NAME} (run validate first)"
    problem = evidence_problem(data, artifact)
    if problem:
        return problem
    write_report(path, {**data, ENGINE_RUN: engine_run.to_dict()})
    return None


def read_validation(out: str | Path, artifact: Mapping[str, str] | None = None) -> ValidationSummary:
    """Never raises for a bad report: the state says what is wrong, and push refuses on anything but passed.

    `artifact` (path -> sha256, see eagle3_quant/records/evidence.py): the report must name exactly these files, else
    its state is "foreign" and none of its results are read.
    """
    path = Path(out) / REPORT_NAME
    if not path.is_file():
        return ValidationSummary(path, "missing", "no validation report")
    try:
        data = load_json_file(path, ValidationRecordError)
    except OSError as exc:
        return ValidationSummary(path, "unreadable", f"validation report cannot be read ({exc.strerror or exc})")
    except ValidationRecordError as exc:
        return ValidationSummary(path, "unreadable", f"validation report {exc.message}")
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
    try:
        metrics = ValidationMetrics.read(data.get("metrics") or {}, path)
    except ValidationRecordError as exc:
        return ValidationSummary(path, "unreadable", f"validation report's metrics are malformed: {exc}")
    taps = metrics.taps or TapsMetrics()
    engine_run = _engine_run(data, path)
    common = dict(checks=checks, metrics=metrics, kernel=kernel, target=target, taps_notes=taps.notes,
                  taps_measured=taps.measured, taps_best=taps.best,
                  gates=_gates_text(data.get("gates"), data.get("gate_source")), engine_run=engine_run,
                  prediction=metrics.prediction_text)
    if data.get("passed") is not True:
        failed = [c.name for c in checks if c.status == "failed"]
        why = f"failed checks: {', '.join(failed)}" if failed else f"'passed' is {data.get('passed')!r}"
        return ValidationSummary(path, "failed", f"validation did not pass ({why})", **common)
    return ValidationSummary(path, "passed", **common)


MEASURED_OFFLINE = "validate --calib"     # the report's acceptance lengths, predicted on a calibration set
MEASURED_BY_ENGINE = "bench"              # vLLM's own acceptance, in its serving engine


def acceptance_measurements(out: str | Path, validation: ValidationSummary,
                            artifact: Mapping[str, str] | None) -> tuple[str, ...]:
    """How this artifact's acceptance was measured: offline (`validate --calib`: the report's FP8 acceptance length
    and ratio) and/or in vLLM's engine (`bench`: the report's engine run, or OUT/bench.json naming these same files).
    () when by neither: what `push` refuses to publish without --allow-unmeasured."""
    found = []
    readable = validation.state in ("passed", "failed")
    if readable and validation.metrics.measured_offline:
        found.append(MEASURED_OFFLINE)
    if (readable and validation.engine_run is not None) or \
            (artifact is not None and (measured_bench(out, artifact) is not None or
                                       measured_llamacpp(out, artifact) is not None)):
        found.append(MEASURED_BY_ENGINE)
    return tuple(found)
