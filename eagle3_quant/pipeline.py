"""`run_pipeline`: calibrate -> quantize (export included) -> validate -> bench -> push, from one pipeline file.

Each stage is first judged: skipped when its output is present and valid (a calibration set whose every shard
has the sha256 recorded when it was written, an artifact whose files match its manifest, a report or bench record
naming these artifact files), run again when its output is missing, damaged or made otherwise. A run that stopped
anywhere resumes where it stopped; `plan_pipeline` (run --dry-run) gives the judgements alone, running nothing.
Every stage calls the stage's public function with the options object the pipeline file describes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eagle3_quant.errors import Eagle3QuantError, ManifestError
from eagle3_quant.pipeline_spec import (
    Override,
    PipelineSpec,
    bench_options,
    calibrate_options,
    gguf_options,
    import_options,
    load_pipeline,
    push_options,
    quantize_options,
    validate_options,
)
from eagle3_quant.quantize.options import AUTO_SCHEME
from eagle3_quant.reading.source import REPO_ID
from eagle3_quant.records.calibration import INDEX_NAME
from eagle3_quant.records.manifest import MANIFEST_NAME, Manifest
from eagle3_quant.util.formatting import ratio_interval
from eagle3_quant.util.progress import SILENT, Progress

STAGES = ("calibrate", "quantize", "validate", "bench", "push")
GGUF_STAGE = "gguf"          # a sixth stage when the file's gguf section is enabled


def stages_of(spec: PipelineSpec) -> tuple[str, ...]:
    return (*STAGES, GGUF_STAGE) if spec.gguf.enabled else STAGES


@dataclass(frozen=True)
class StageOutcome:
    name: str
    status: str        # ran | skipped | failed | not run | disabled; plan_pipeline: would run
    seconds: float
    detail: str


@dataclass(frozen=True)
class PipelineResult:
    spec: PipelineSpec
    stages: tuple[StageOutcome, ...]
    push: Any = None    # PushResult when the push stage ran (or was tried as a dry run by plan_pipeline)
    planned: bool = False   # plan_pipeline: the stages judged, none run

    @property
    def ok(self) -> bool:
        return not any(s.status in ("failed", "not run") for s in self.stages)


class _Skip(Exception):
    """A stage decided not to run; the message says why."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _is_hub_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and not Path(text).exists()


def judge_calibrate(spec: PipelineSpec, fresh: bool = False) -> str:
    """Why the calibrate stage runs; raises _Skip when it does not (no data, or the workdir's set is present, whole
    and made from this data for this target)."""
    c = spec.calibrate
    if not c.data and not c.from_dump:
        raise _Skip("skipped", "no calibrate.data nor calibrate.from_dump: the validation runs its data-free checks "
                               "only")
    from eagle3_quant.calib.target import target_name
    from eagle3_quant.records.calibration import load_calibration

    if not (spec.calib / INDEX_NAME).is_file():
        return f"no set in {spec.calib}"
    try:
        existing = load_calibration(spec.calib)
    except Eagle3QuantError as exc:
        return f"the set in {spec.calib} does not read ({exc.message}): made again"
    damaged = existing.shard_problems()
    if damaged:
        return f"the set in {spec.calib} is damaged ({damaged[0]}): made again"
    if c.from_dump:
        if existing.info.extra.get("imported_from") == str(Path(c.from_dump).expanduser().resolve()):
            raise _Skip("skipped", f"present: {existing.num_samples} samples imported from {c.from_dump}")
        return f"the set in {spec.calib} was made from other data: replaced"
    if existing.num_samples >= c.num_samples and existing.info.target == target_name(spec.target):
        raise _Skip("skipped", f"present: {existing.num_samples} samples, {existing.num_tokens} tokens")
    return f"the set in {spec.calib} has fewer samples or another target"


def run_calibrate(spec: PipelineSpec, why: str, progress: Progress) -> str:
    from eagle3_quant.records.calibration import load_calibration

    c = spec.calibrate
    force = (spec.calib / INDEX_NAME).is_file()      # a set judged not this one (damaged, other data): replaced
    if c.from_dump:
        from eagle3_quant.calib.importer import import_calibration

        import_calibration(c.from_dump, spec.source, spec.calib, import_options(spec, force=force), progress=progress)
        done = load_calibration(spec.calib)
        return f"{done.num_samples} samples, {done.num_tokens} tokens imported from {c.from_dump}"
    from eagle3_quant.calib.api import calibrate_target

    calibrate_target(spec.target, spec.source, c.data, spec.calib, calibrate_options(spec, force=force),
                     progress=progress)
    done = load_calibration(spec.calib)
    return f"{done.num_samples} samples, {done.num_tokens} tokens in {spec.calib}"


def _existing_output_problem(spec: PipelineSpec) -> str | None:
    """None when OUT holds a draft quantized from this source with this plan and unchanged files."""
    from eagle3_quant.plan import make_plan
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.records.public_names import recorded_source_path
    from eagle3_quant.schemes import get_scheme

    manifest = Manifest.read(spec.out)
    source = manifest.source
    local = recorded_source_path(spec.out) or Path(source.path)   # the manifest names only the folder
    scheme, quantize_fc, draft_vocab = spec.scheme, spec.quantize.quantize_fc, spec.quantize.draft_vocab
    auto = manifest.auto_choice
    if spec.scheme == AUTO_SCHEME:     # the recorded choice stands while the gate and the engines are the same
        if auto is None:
            return f"scheme was {manifest.scheme.name}, not {AUTO_SCHEME}"
        if (auto.min_acceptance_ratio, auto.engine) != (spec.quantize.min_acceptance_ratio, spec.quantize.engine):
            return f"the auto gate was {auto.min_acceptance_ratio} for {auto.engine}"
        chosen = auto.chosen_candidate
        scheme, quantize_fc, draft_vocab = chosen.scheme, chosen.quantize_fc, chosen.draft_vocab
    elif auto is not None or manifest.scheme.name != spec.scheme:
        return f"scheme was {AUTO_SCHEME if auto is not None else manifest.scheme.name}"
    same_source = (source.repo_id == spec.source if _is_hub_id(spec.source)
                   else local.resolve() == Path(spec.source).resolve())
    if not same_source or (spec.revision and source.revision != spec.revision):
        return f"made from {manifest.source_name}"
    if not local.is_dir():
        return "its source folder is gone"
    plan = make_plan(read_draft(local), get_scheme(scheme), spec.quantize.exclude or None, quantize_fc)
    recorded = {d.module: d.quantized for d in manifest.layers}
    threshold = (manifest.sensitivity or {}).get("threshold")
    if threshold != spec.quantize.auto_exclude:
        return f"auto_exclude was {threshold}"
    pruned_to = (manifest.vocab_pruning or {}).get("draft_vocab")
    if pruned_to != draft_vocab:
        return f"draft_vocab was {pruned_to}"
    smoothed_with = (manifest.smoothing or {}).get("alpha")
    if smoothed_with != spec.quantize.smooth_alpha:
        return f"smooth_alpha was {smoothed_with}"
    if (manifest.gptq is not None) != spec.quantize.gptq:
        return f"gptq was {'on' if manifest.gptq is not None else 'off'}"
    auto_kept = {d.module for d in manifest.layers if d.reason.startswith("auto-exclude")}
    if any(recorded.get(d.module) != d.quantize for d in plan.decisions if d.module not in auto_kept):
        return "the exclusions changed"
    problems = manifest.output_problems(spec.out)
    return "; ".join(problems) if problems else None


def judge_quantize(spec: PipelineSpec, fresh: bool = False) -> str:
    """Why the quantize stage runs; raises _Skip when OUT holds this source quantized with this plan, unchanged."""
    if not (spec.out / MANIFEST_NAME).is_file():
        return f"no artifact in {spec.out}"
    try:
        Manifest.read(spec.out)
    except ManifestError as exc:
        return f"replaced: its manifest does not read ({exc.message})"
    why = _existing_output_problem(spec)
    if why is None:
        raise _Skip("skipped", f"present: {spec.out} matches its manifest and this pipeline")
    return f"replaced: {why}"


def run_quantize(spec: PipelineSpec, why: str, progress: Progress) -> str:
    from eagle3_quant.quantize.api import quantize_draft

    replacing = (spec.out / MANIFEST_NAME).is_file()
    result = quantize_draft(spec.source, spec.out, quantize_options(spec, force=replacing), progress=progress)
    note = f" ({why})" if replacing else ""
    return f"{len(result.plan.quantized)} linears FP8, {len(result.plan.excluded)} BF16{note}"


def judge_validate(spec: PipelineSpec, fresh: bool = False) -> str:
    """Why the validate stage runs (`fresh`: quantize makes the artifact in this run); raises _Skip when OUT's
    report names these artifact files and is newer than the manifest (a failed one: the stage fails)."""
    from eagle3_quant.records.evidence import manifest_digests
    from eagle3_quant.records.validation_report import read_validation

    if not spec.validate.enabled:
        raise _Skip("disabled", "validate.enabled is false")
    if fresh:
        return "the artifact is made in this run"
    report = read_validation(spec.out, manifest_digests(Manifest.read(spec.out)))   # foreign: validate again
    manifest_time = (spec.out / MANIFEST_NAME).stat().st_mtime
    if report.state in ("passed", "failed") and report.path.stat().st_mtime >= manifest_time:
        if report.state == "failed":
            raise _Skip("failed", f"present and failed: {report.problem}")
        raise _Skip("skipped", "present: passed")
    return report.problem or "the report is older than the artifact"


def run_validate(spec: PipelineSpec, why: str, progress: Progress) -> str:
    from eagle3_quant.records.validation_report import read_validation
    from eagle3_quant.validate.api import validate_draft

    calib = spec.calib if (spec.calib / INDEX_NAME).is_file() else None
    # a Hub source: validate_draft finds the downloaded BF16 folder through the manifest itself
    reference = None if _is_hub_id(spec.source) else spec.source
    validate_draft(spec.out, validate_options(spec, reference=reference, calib=calib), progress=progress)
    report = read_validation(spec.out)
    if not report.passed:
        raise _Skip("failed", report.problem)
    return "passed"


def judge_bench(spec: PipelineSpec, fresh: bool = False, calib_coming: bool = False) -> str:
    """Why the bench stage runs: vLLM's own measurement (`bench_draft`), when an engine environment, a target and
    prompts are there (`calib_coming`: the workdir's set is made in this run); raises _Skip, saying why, when one
    is missing, or when OUT/bench.json already measured these artifact files."""
    from eagle3_quant.engines.environment import find_engine_python
    from eagle3_quant.errors import EngineNotFoundError
    from eagle3_quant.records.bench_run import BENCH_NAME, measured_bench
    from eagle3_quant.records.evidence import artifact_digests

    if not spec.bench.enabled:
        raise _Skip("disabled", "bench.enabled is false")
    if not spec.target:
        raise _Skip("skipped", "no target: bench runs the target in vLLM's engine (set target)")
    try:
        find_engine_python()
    except EngineNotFoundError as exc:
        raise _Skip("skipped", f"no engine: {exc}") from None
    if spec.bench.prompts is None and not calib_coming and bench_options(spec).prompts is None:
        raise _Skip("skipped", "no prompts: set bench.prompts, or calibrate.data for the workdir's calibration set")
    if fresh:
        return "the artifact is made in this run"
    if measured_bench(spec.out, artifact_digests(spec.out)) is not None:
        raise _Skip("skipped", f"present: {BENCH_NAME} measured these artifact files")
    return f"no {BENCH_NAME} measured these artifact files"


def run_bench(spec: PipelineSpec, why: str, progress: Progress) -> str:
    from eagle3_quant.bench.api import bench_draft

    options = bench_options(spec, reference=None if _is_hub_id(spec.source) else spec.source)
    result = bench_draft(spec.out, options, progress=progress)
    ratio, predicted = result.ratio, result.predicted
    text = (f"{result.engine.describe()}: acceptance ratio {ratio_interval(ratio.ratio, ratio.low, ratio.high)}, "
            f"lossless {'yes' if result.lossless else 'NO'}")
    if predicted is not None and predicted.acceptance_ratio is not None:
        text += f", predicted {predicted.acceptance_ratio:.4f}"
    return text


def judge_push(spec: PipelineSpec, fresh: bool = False) -> str:
    if not spec.push.enabled:
        raise _Skip("disabled", "push.enabled is false")
    what = "print what it would send (push.dry_run)" if spec.push.dry_run else "publish"
    return f"{what} to {spec.push.repo_id}"


def run_push(spec: PipelineSpec, why: str, progress: Progress, dry_run: bool = False) -> Any:
    from eagle3_quant.export.push import push_draft

    options = push_options(spec, pipeline=Path(spec.path).name if spec.path else None)
    return push_draft(spec.out, spec.push.repo_id, replace(options, dry_run=options.dry_run or dry_run))


def _push_detail(result: Any) -> str:
    if result.dry_run:
        return f"dry run: {len(result.files)} files for {result.repo_id}; nothing sent"
    if result.commit_oid:
        return f"{len(result.uploaded)} file(s) to {result.repo_url} commit {result.commit_oid[:12]}"
    return f"unchanged: {result.repo_url} already at {result.head[:12]}; no commit"


def judge_gguf(spec: PipelineSpec, fresh: bool = False) -> str:
    """Why the gguf stage runs; raises _Skip when the workdir's GGUF is this type, made from this draft, unchanged,
    and measured as the section asks (validated on the workdir's set, benched against bench_target)."""
    from eagle3_quant.records.evidence import check_integrity, manifest_digests
    from eagle3_quant.records.llamacpp_bench import measured_llamacpp
    from eagle3_quant.records.validation_report import read_validation

    g, out = spec.gguf, spec.gguf_out
    if fresh and g.from_artifact:
        return "the artifact it is made from is made in this run"
    if not (out / MANIFEST_NAME).is_file():
        return f"no GGUF draft in {out}"
    try:
        manifest = Manifest.read(out)
        check_integrity(out, manifest, ManifestError)
    except ManifestError as exc:
        return f"replaced: {exc.message}"
    record = manifest.gguf
    if record is None or record.type != g.type:
        return f"replaced: it is {record.label if record else 'no GGUF'}, not {g.type}"
    files = manifest_digests(manifest)
    if (spec.calib / INDEX_NAME).is_file() and not read_validation(out, files).passed:
        return "not validated on the workdir's calibration set"
    if g.bench_target and measured_llamacpp(out, files) is None:
        return "not benched in llama.cpp"
    raise _Skip("skipped", f"present: {out} ({record.label}) matches its manifest and was measured")


def run_gguf(spec: PipelineSpec, why: str, progress: Progress) -> str:
    from eagle3_quant.bench.llamacpp_api import bench_gguf
    from eagle3_quant.bench.llamacpp_options import LlamaCppBenchOptions
    from eagle3_quant.quantize.gguf_api import gguf_draft
    from eagle3_quant.validate.api import validate_draft

    g, out = spec.gguf, spec.gguf_out
    made = gguf_draft(spec.out if g.from_artifact else spec.source, out, gguf_options(spec, force=True),
                      progress=progress)
    done = [f"{made.record.label} GGUF in {out}"]
    if (spec.calib / INDEX_NAME).is_file():
        reference = None if _is_hub_id(spec.source) else spec.source
        report = validate_draft(out, validate_options(spec, reference=reference, calib=spec.calib))
        if not report.passed:
            raise _Skip("failed", f"{made.record.label} GGUF: validation failed: "
                                  f"{', '.join(c.name for c in report.failed_checks)}")
        done.append("validated")
    if g.bench_target:
        prompts = bench_options(spec).prompts
        result = bench_gguf(out, LlamaCppBenchOptions(target=g.bench_target, prompts=prompts,
                                                      num_prompts=spec.bench.num_prompts,
                                                      max_tokens=spec.bench.max_tokens, k=spec.bench.k,
                                                      seed=spec.bench.seed), progress=progress)
        done.append(f"llama.cpp: {result.record.verdict}")
    if g.repo_id:
        from eagle3_quant.export.push import push_draft

        options = push_options(spec, pipeline=Path(spec.path).name if spec.path else None)
        done.append(_push_detail(push_draft(out, g.repo_id, options)))
    return "; ".join(done)


JUDGES = {"calibrate": judge_calibrate, "quantize": judge_quantize, "validate": judge_validate, "bench": judge_bench,
          "push": judge_push, GGUF_STAGE: judge_gguf}
RUNNERS = {"calibrate": run_calibrate, "quantize": run_quantize, "validate": run_validate, "bench": run_bench,
           "push": run_push, GGUF_STAGE: run_gguf}


def _spec(pipeline: str | Path | PipelineSpec, overrides: list[Override] | None) -> PipelineSpec:
    return pipeline if isinstance(pipeline, PipelineSpec) else load_pipeline(pipeline, overrides)


def paths_line(spec: PipelineSpec) -> str:
    """Where the run reads and writes, resolved (relative paths in the file and in --set start from the current
    folder)."""
    local = [f"{name} {Path(value).expanduser().resolve()}" for name, value in
             (("source", spec.source), ("target", spec.target)) if value and Path(value).expanduser().exists()]
    return (f"pipeline {spec.path}: relative paths start from the current folder {Path.cwd()}; "
            + ", ".join([*local, f"workdir {Path(spec.workdir).expanduser().resolve()}"]))


def run_pipeline(pipeline: str | Path | PipelineSpec, overrides: list[Override] | None = None, *,
                 progress: Progress = SILENT) -> PipelineResult:
    """Judge and run every stage in order, each saying on `progress` what it does and why; stop at the first
    failure (later stages: `not run`)."""
    spec = _spec(pipeline, overrides)
    progress.say(paths_line(spec))
    outcomes: list[StageOutcome] = []
    pushed = None
    blocked = None
    stages = stages_of(spec)
    for n, name in enumerate(stages, 1):
        if blocked and not (name == "push" and not spec.push.enabled):
            outcomes.append(StageOutcome(name, "not run", 0.0, f"stopped after {blocked}"))
            progress.say(f"[{n}/{len(stages)}] {name}: not run (stopped after {blocked})")
            continue
        started = time.perf_counter()
        try:
            why = JUDGES[name](spec)
            progress.say(f"[{n}/{len(stages)}] {name}: runs ({why})")
            value = RUNNERS[name](spec, why, progress)
            if name == "push":
                pushed, value = value, _push_detail(value)
            status, detail = "ran", value
        except _Skip as skip:
            status, detail = skip.status, skip.detail
        except Eagle3QuantError as exc:
            status, detail = "failed", str(exc)
        seconds = time.perf_counter() - started
        outcomes.append(StageOutcome(name, status, seconds, detail))
        took = f" in {seconds:.1f} s" if status in ("ran", "failed") else ""
        progress.say(f"[{n}/{len(stages)}] {name}: {status}{took}: {detail}")
        unvalidated = name == "validate" and status == "failed"
        must_stop = (status == "failed" or unvalidated) and not (unvalidated and spec.push.allow_unvalidated)
        if must_stop:
            blocked = name
    return PipelineResult(spec, tuple(outcomes), pushed)


def plan_pipeline(pipeline: str | Path | PipelineSpec, overrides: list[Override] | None = None) -> PipelineResult:
    """`run --dry-run`: the file read and checked as `run` reads it, then each stage judged on the workdir as it is
    (`would run` and why, `skipped` and why, `disabled`); nothing is run, written or sent. When no earlier stage
    would run, the push is tried as a push dry run (its refusals included)."""
    spec = _spec(pipeline, overrides)
    outcomes: list[StageOutcome] = []
    pushed = blocked = None
    fresh = calib_coming = False       # quantize / calibrate would make their output in this run
    for name in stages_of(spec):
        if blocked and not (name == "push" and not spec.push.enabled):
            outcomes.append(StageOutcome(name, "not run", 0.0, f"stopped after {blocked}"))
            continue
        try:
            why = judge_bench(spec, fresh, calib_coming) if name == "bench" else JUDGES[name](spec, fresh)
            status, detail = "would run", why
            if name == "push" and not any(o.status == "would run" for o in outcomes):
                pushed = run_push(spec, why, SILENT, dry_run=True)
                detail = f"{why}: {len(pushed.files)} files; the card as printed above"
        except _Skip as skip:
            status, detail = skip.status, skip.detail
        except Eagle3QuantError as exc:
            status, detail = "failed", str(exc)
        outcomes.append(StageOutcome(name, status, 0.0, detail))
        fresh = fresh or (name == "quantize" and status == "would run")
        calib_coming = calib_coming or (name == "calibrate" and status == "would run")
        if status == "failed" and not (name == "validate" and spec.push.allow_unvalidated):
            blocked = name
    return PipelineResult(spec, tuple(outcomes), pushed, planned=True)
