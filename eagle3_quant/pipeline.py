"""`run_pipeline`: calibrate -> quantize (export included) -> validate -> push, from one pipeline file.

Each stage is skipped when its output is present and valid, so a run that stopped anywhere resumes where it
stopped. Every stage calls the stage's public function; a stage whose function is not installed reports
`unavailable` instead of pretending.
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.errors import Eagle3QuantError, PipelineSpecError, PublishError
from eagle3_quant.pipeline_preflight import preflight
from eagle3_quant.pipeline_spec import PipelineSpec, load_pipeline
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.source import REPO_ID

STAGES = ("calibrate", "quantize", "validate", "push")


@dataclass(frozen=True)
class StageOutcome:
    name: str
    status: str        # ran | skipped | unavailable | failed | not run | disabled
    seconds: float
    detail: str


@dataclass(frozen=True)
class PipelineResult:
    spec: PipelineSpec
    stages: tuple[StageOutcome, ...]
    push: Any = None    # PushResult when the push stage ran

    @property
    def ok(self) -> bool:
        return not any(s.status in ("failed", "not run") for s in self.stages)


class _Skip(Exception):
    """A stage decided not to run; the message says why."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _stage_function(name: str) -> Callable:
    """A stage's public function from the package's lazy table (`eagle3_quant.<name>`)."""
    try:
        return getattr(importlib.import_module("eagle3_quant"), name)
    except (ImportError, AttributeError):
        raise _Skip("unavailable", f"eagle3_quant.{name} is not installed in this version") from None


def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call a stage function with the spec's keywords; a keyword it does not take is a spec error, not dropped."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    refused = sorted(k for k in kwargs if k not in params and not takes_any)
    if refused:
        raise PipelineSpecError(f"{fn.__module__}.{fn.__name__} takes no option(s) {', '.join(refused)}; it takes: "
                                f"{', '.join(p for p in params if p not in ('self',))}")
    return fn(*args, **kwargs)


def _is_hub_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and not Path(text).exists()


def run_calibrate(spec: PipelineSpec) -> str:
    c = spec.calibrate
    if not c.data:
        raise _Skip("skipped", "no calibrate.data: the validation runs its data-free checks only")
    from eagle3_quant.calib.format import load_calibration

    if (spec.calib / "calib.json").is_file():
        existing = load_calibration(spec.calib)
        if existing.num_samples >= c.num_samples and existing.info.target == spec.target:
            raise _Skip("skipped", f"present: {existing.num_samples} samples, {existing.num_tokens} tokens")
    fn = _stage_function("calibrate_target")
    _call(fn, target=spec.target, draft=spec.source, data=c.data, out=spec.calib, revision=spec.revision,
          num_samples=c.num_samples, seq_len=c.seq_len, **c.options)
    done = load_calibration(spec.calib)
    return f"{done.num_samples} samples, {done.num_tokens} tokens in {spec.calib}"


def _existing_output_problem(spec: PipelineSpec) -> str | None:
    """None when OUT holds a draft quantized from this source with this plan and unchanged files."""
    from eagle3_quant.draft import read_draft
    from eagle3_quant.export.card import read_manifest
    from eagle3_quant.export.push_files import files_to_send
    from eagle3_quant.public_names import recorded_source_path
    from eagle3_quant.quantize.plan import make_plan
    from eagle3_quant.schemes import get_scheme

    manifest = read_manifest(spec.out)
    source = manifest.data["source"]
    local = recorded_source_path(spec.out) or Path(source.get("path") or "")   # the manifest names only the folder
    if manifest.data["scheme"]["name"] != spec.scheme:
        return f"scheme was {manifest.data['scheme']['name']}"
    same_source = (source.get("repo_id") == spec.source if _is_hub_id(spec.source)
                   else local.resolve() == Path(spec.source).resolve())
    if not same_source or (spec.revision and source.get("revision") != spec.revision):
        return f"made from {source.get('repo_id') or source.get('path')}"
    if not local.is_dir():
        return "its source folder is gone"
    plan = make_plan(read_draft(local), get_scheme(spec.scheme), spec.quantize.exclude or None,
                     spec.quantize.quantize_fc)
    recorded = {d["module"]: d["quantized"] for d in manifest.data["layers"]}
    threshold = (manifest.data.get("sensitivity") or {}).get("threshold")
    if threshold != spec.quantize.auto_exclude:
        return f"auto_exclude was {threshold}"
    auto_kept = {d["module"] for d in manifest.data["layers"] if d["reason"].startswith("auto-exclude")}
    if any(recorded.get(d.module) != d.quantize for d in plan.decisions if d.module not in auto_kept):
        return "the exclusions changed"
    try:
        files_to_send(spec.out, manifest)
    except PublishError as exc:
        return str(exc)
    return None


def run_quantize(spec: PipelineSpec) -> str:
    from eagle3_quant.quantize.api import quantize_draft

    replace_why = None
    if (spec.out / "eagle3_quant.json").is_file():
        replace_why = _existing_output_problem(spec)
        if replace_why is None:
            raise _Skip("skipped", f"present: {spec.out} matches its manifest and this pipeline")
    needs_calib = SCHEMES[spec.scheme].needs_calibration or spec.quantize.auto_exclude is not None
    result = quantize_draft(spec.source, spec.out, spec.scheme, spec.quantize.exclude or None, spec.quantize.device,
                            quantize_fc=spec.quantize.quantize_fc, force=replace_why is not None,
                            revision=spec.revision, calib=spec.calib if needs_calib else None,
                            auto_exclude=spec.quantize.auto_exclude)
    note = f" (replaced: {replace_why})" if replace_why else ""
    return f"{len(result.plan.quantized)} linears FP8, {len(result.plan.excluded)} BF16{note}"


def run_validate(spec: PipelineSpec) -> str:
    from eagle3_quant.evidence import manifest_digests
    from eagle3_quant.export.validation_report import read_validation
    from eagle3_quant.manifest_check import read_checked_manifest

    if not spec.validate.enabled:
        raise _Skip("disabled", "validate.enabled is false")
    report = read_validation(spec.out, manifest_digests(read_checked_manifest(spec.out) or {}))   # foreign: again
    manifest_time = (spec.out / "eagle3_quant.json").stat().st_mtime
    if report.state in ("passed", "failed") and report.path.stat().st_mtime >= manifest_time:
        if report.state == "failed":
            raise _Skip("failed", f"present and failed: {report.problem}")
        raise _Skip("skipped", "present: passed")
    fn = _stage_function("validate_draft")
    calib = spec.calib if (spec.calib / "calib.json").is_file() else None
    # a Hub source: validate_draft finds the downloaded BF16 folder through the manifest itself
    reference = None if _is_hub_id(spec.source) else spec.source
    _call(fn, spec.out, reference=reference, calib=calib, **spec.validate.options)
    report = read_validation(spec.out)
    if not report.passed:
        raise _Skip("failed", report.problem)
    return "passed"


def run_push(spec: PipelineSpec) -> Any:
    from eagle3_quant.export.push import push_draft

    p = spec.push
    if not p.enabled:
        raise _Skip("disabled", "push.enabled is false")
    return push_draft(spec.out, p.repo_id, revision=p.revision, create_pr=p.create_pr, private=p.private, tag=p.tag,
                      commit_message=p.commit_message, dry_run=p.dry_run, allow_unvalidated=p.allow_unvalidated,
                      target=spec.target, base_model=spec.source if _is_hub_id(spec.source) else None,
                      pipeline=Path(spec.path).name if spec.path else None)


def _push_detail(result: Any) -> str:
    if result.dry_run:
        return f"dry run: {len(result.files)} files for {result.repo_id}; nothing sent"
    if result.commit_oid:
        return f"{len(result.uploaded)} file(s) to {result.repo_url} commit {result.commit_oid[:12]}"
    return f"unchanged: {result.repo_url} already at {result.head[:12]}; no commit"


def run_pipeline(pipeline: str | Path | PipelineSpec, overrides: list[str] | None = None) -> PipelineResult:
    """Run every stage in order; stop at the first failure (later stages: `not run`)."""
    spec = pipeline if isinstance(pipeline, PipelineSpec) else load_pipeline(pipeline, overrides)
    preflight(spec)     # every stage's options, before the first stage runs
    stages = {"calibrate": run_calibrate, "quantize": run_quantize, "validate": run_validate, "push": run_push}
    outcomes: list[StageOutcome] = []
    pushed = None
    blocked = None
    for name in STAGES:
        if blocked and not (name == "push" and not spec.push.enabled):
            outcomes.append(StageOutcome(name, "not run", 0.0, f"stopped after {blocked}"))
            continue
        started = time.perf_counter()
        try:
            value = stages[name](spec)
            if name == "push":
                pushed, value = value, _push_detail(value)
            status, detail = "ran", value
        except _Skip as skip:
            status, detail = skip.status, skip.detail
        except Eagle3QuantError as exc:
            status, detail = "failed", str(exc)
        outcomes.append(StageOutcome(name, status, time.perf_counter() - started, detail))
        unvalidated = name == "validate" and status in ("failed", "unavailable")
        must_stop = (status == "failed" or unvalidated) and not (unvalidated and spec.push.allow_unvalidated)
        must_stop |= status == "unavailable" and name == "calibrate" and SCHEMES[spec.scheme].needs_calibration
        if must_stop:
            blocked = name
    return PipelineResult(spec, tuple(outcomes), pushed)
