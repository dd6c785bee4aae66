"""`quantize_draft`: BF16 Eagle3 draft in, checked FP8 draft out (or nothing at all)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from eagle3_quant.engines.choice import check_choice, choose_engines
from eagle3_quant.engines.vllm.loader_compat import LoaderCheck, check_loader_compat, loader_family
from eagle3_quant.errors import LoaderCompatError, SchemeError
from eagle3_quant.inspection import estimate_output_bytes
from eagle3_quant.options import build_options, pick_device
from eagle3_quant.plan import QuantPlan, make_plan
from eagle3_quant.quantize.checks import check_resources, check_vocab_map
from eagle3_quant.quantize.export_config import rewrite_config
from eagle3_quant.quantize.finite_scan import scan_source
from eagle3_quant.quantize.options import AUTO_SCHEME, QuantizeOptions
from eagle3_quant.quantize.quark_import import import_quark_in_background
from eagle3_quant.quantize.serve_taps import TapsDecision, TapsMeasurement, decide_serve_taps, measure_serve_taps
from eagle3_quant.quantize.side_files import copy_side_files
from eagle3_quant.quantize.source_guard import check_source_unchanged, identities
from eagle3_quant.quantize.verify_export import verify_export
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.pickle_source import pickle_converted, pickle_only
from eagle3_quant.reading.source import DraftSource, resolve_source
from eagle3_quant.reading.source_card import repo_id_from_cache_path, source_card_info
from eagle3_quant.records.auto_choice import AutoChoiceRecord
from eagle3_quant.records.manifest import (
    MANIFEST_NAME,
    EnginesRecord,
    ExcludeRecord,
    LayerRecord,
    Manifest,
    SchemeRecord,
    SourceRecord,
    write_manifest,
)
from eagle3_quant.records.public_names import public_command, public_name, write_local_record
from eagle3_quant.schemes import get_scheme
from eagle3_quant.util.hashing import FileDigest, digest_folder
from eagle3_quant.util.outdir import check_output_target, claimed_output, staged_output
from eagle3_quant.util.progress import SILENT, Progress
from eagle3_quant.util.stage_timer import StageTimer


@dataclass(frozen=True)
class QuantizeResult:
    output: Path
    manifest: Manifest
    plan: QuantPlan
    loader_check: LoaderCheck
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)   # stage -> wall seconds
    warnings: tuple[str, ...] = ()      # what the written artifact already says validate will find

    @property
    def manifest_path(self) -> Path:
        return self.output / MANIFEST_NAME


def _auto_exclude(draft, scheme: str, plan: QuantPlan, calib, threshold: float, device: str,
                  taps: tuple[int, ...] | None = None) -> tuple[dict, dict[str, str]]:
    """Measure the planned groups' sensitivity: (report for the manifest, role -> reason to keep it BF16)."""
    from eagle3_quant.quantize.sensitivity import linear_groups, measure_sensitivity

    planned = {d.role for d in plan.quantized}
    groups = [g for g, (roles, _) in linear_groups(draft).items() if set(roles) <= planned]
    report = measure_sensitivity(draft.path, calib, scheme=scheme, device=device, groups=groups, taps=taps)
    reasons = {role: f"auto-exclude: quantizing {g.group} alone changes the draft's top-1 on "
                     f"{g.disagreement:.2%} of {report.positions} calibration positions (> {threshold:.2%}), "
                     f"KL {g.kl:.3g}"
               for g in report.above(threshold) for role in g.roles}
    return {"threshold": threshold, **report.to_dict()}, reasons


def quantize_draft(src: str | Path, out: str | Path, options: QuantizeOptions | None = None, *,
                   progress: Progress = SILENT, **overrides) -> QuantizeResult:
    """Quantize an Eagle3 draft with Quark; write OUT atomically; return what was decided and written.

    `options` (a `QuantizeOptions`; keyword arguments override its fields, e.g. ``scheme="fp8", calib=CAL``):
    `exclude` adds module names to the default BF16 set (fc, lm_head); `quantize_fc` removes fc from it;
    `auto_exclude` (needs `calib`) also keeps BF16 every layer group whose quantization alone changes the
    draft's top-1 token on more than this fraction of calibration positions (see `measure_sensitivity`);
    `allow_pickle` accepts a draft with only pickle weights, loaded with torch.load(weights_only=True) and
    converted to safetensors beside OUT (the source is only read); `draft_vocab` (needs `calib`) keeps the N
    target tokens the target emits most often in the calibration set (``quantize/vocab_prune.py``): the pruned
    BF16 draft is quantized as any source. `quantize_lm_head` is refused: no engine loads a quantized Eagle3
    lm_head (``eagle3_quant/lm_head_support.py``). `serve_taps` (``taps/serve_decision.py``): trained writes the ids
    so that every engine feeds the layers the draft was trained on (the config's convention, or measured on
    `calib`), as-is keeps them.
    """
    opts = build_options(QuantizeOptions, options, overrides)
    started = time.perf_counter()
    command = public_command("quantize", (src, out), opts)     # what the manifest records: no local path
    with claimed_output(Path(out), opts.force, Path(src)):   # one writer per OUT, from the first check to the rename
        result = _dispatch(src, out, opts, command, progress)
    warning = sqnr_warning(result.output, result.manifest)
    return replace(result, seconds=time.perf_counter() - started,   # the whole verb, pre-passes included
                   warnings=(warning,) if warning else ())


def sqnr_warning(out: Path, manifest: Manifest) -> str | None:
    """When the written weights' lowest SQNR (validate's weight_sqnr, against the source the local record names) is
    already under the scheme's validate gate: what validate will say, and the rung `--scheme auto` would try next."""
    from eagle3_quant.quantize.next_rung import next_rung
    from eagle3_quant.records.artifact import open_artifact, read_reference
    from eagle3_quant.runtime.weight_sqnr import weight_sqnr
    from eagle3_quant.scheme_gates import gates_for_scheme

    if manifest.smoothing:              # AWQ or SmoothQuant folded scales into the weights: they differ by design
        return None
    artifact = open_artifact(Path(out))
    reference = read_reference(None, artifact)
    if reference is None:
        return None
    rows = [row for row in weight_sqnr(artifact.files, reference) if math.isfinite(row["sqnr_db"])]
    gate = gates_for_scheme(manifest.scheme.name).min_weight_sqnr_db
    worst = min(rows, key=lambda row: row["sqnr_db"], default=None)
    if worst is None or worst["sqnr_db"] >= gate:
        return None
    hint = next_rung(manifest, reference)
    return (f"the lowest weight SQNR, {worst['sqnr_db']:.1f} dB ({worst['module']}), is under {manifest.scheme.name}'s "
            f"validate gate of {gate} dB: validate will fail it" + (f"; try {hint}" if hint else ""))


def _dispatch(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
              progress: Progress, measured: TapsMeasurement | None = None) -> QuantizeResult:
    """`measured`: the serve-taps measurement already made on opts.calib (``--scheme auto`` for its rungs)."""
    if opts.scheme == AUTO_SCHEME:
        return _quantize_auto(src, out, opts, command, progress)
    if opts.quantize_lm_head or opts.draft_vocab is not None:
        return _quantize_pruned(src, out, opts, command, measured=measured)
    if opts.smooth_alpha is not None:
        return _quantize_smoothed(src, out, opts, command, progress, measured)
    if get_scheme(opts.scheme).rounding == "awq" and not (opts.rtn or opts.gptq):
        return _quantize_awq(src, out, opts, command, progress, measured)
    if opts.allow_pickle:
        source = resolve_source(src, opts.revision, include_pickle=True)
        if pickle_only(source.path):
            with pickle_converted(source.path, Path(out), opts.force) as converted:
                return _quantize(converted, out, replace(opts, revision=None), command, origin=source,
                                 progress=progress, measured=measured)
    return _quantize(src, out, opts, command, progress=progress, measured=measured)


def _quantize_auto(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
                   progress: Progress) -> QuantizeResult:
    """--scheme auto: every check before any work, the ladder measured, then only the chosen candidate written
    through the normal path (``quantize/auto.py``)."""
    from eagle3_quant.devices import resolve_profile
    from eagle3_quant.lm_head_support import check_quantize_lm_head
    from eagle3_quant.quantize.auto import AUTO_K, AutoSettings, run_auto
    from eagle3_quant.quantize.calibration import check_calibration
    from eagle3_quant.quantize.vocab_prune import target_token_counts
    from eagle3_quant.records.calibration import load_calibration

    profile = resolve_profile(opts.device_profile)
    draft = _read_served(src, opts)
    if opts.quantize_lm_head:
        check_quantize_lm_head(draft.config.architecture)
    check_output_target(Path(out), draft.path, opts.force)
    calibration = load_calibration(opts.calib)
    check_calibration(draft, calibration)
    target_token_counts(opts.calib, draft.config.vocab_size)     # target ids of another vocabulary: refused here
    check_vocab_map(draft)
    scan_source(draft)
    import_quark_in_background(opts.verbose)      # Quark writes the choice (and AWQ/NVFP4 rungs): its import overlaps
    progress.say(f"--scheme auto: the BF16 draft on the calibration set's {calibration.num_samples} samples first "
                 "(the layers it is served with, and the reference every rung pairs with)")
    measured = measure_serve_taps(draft, opts.calib, pick_device(opts.device))
    taps = _serve_taps(draft, opts, measured)
    settings = AutoSettings(opts.min_acceptance_ratio, opts.engine, pick_device(opts.device), profile,
                            opts.measure_all, opts.serve_taps, _rung_writer(measured))
    chosen, record = run_auto(draft, opts.calib, check_calibration(draft, calibration, taps.indices), opts.exclude,
                              settings, progress, measured.chains(taps.indices, AUTO_K), measured.seconds_per_draft)
    picked = replace(opts, scheme=chosen.scheme, quantize_fc=chosen.quantize_fc, draft_vocab=chosen.draft_vocab,
                     device_profile=None, measure_all=False)
    if chosen.draft_vocab is not None:
        return _quantize_pruned(src, out, picked, command, auto_choice=record, taps=taps)
    return _quantize(src, out, picked, command, auto_choice=record, taps=taps)


def _rung_writer(measured: TapsMeasurement):
    """How `--scheme auto` has Quark write a rung into its temporary folder: the normal path, with the serve-taps
    measurement it already made (the rest of the decision follows each rung's engines)."""
    def write(src: Path, out: Path, opts: QuantizeOptions) -> QuantizeResult:
        return _dispatch(src, out, opts, public_command("quantize", (src, out), opts), SILENT, measured)
    return write


def _serve_taps(draft, opts: QuantizeOptions, measured: TapsMeasurement | None = None) -> TapsDecision:
    """The layers the artifact is served with, written for the engines it is for (`--engine auto`: those that
    serve this draft's format and scheme)."""
    scheme = None if opts.scheme == AUTO_SCHEME else get_scheme(opts.scheme)
    engines = choose_engines(opts.engine, draft.config, draft.format, scheme, opts.quantize_fc).engines
    return decide_serve_taps(draft, opts.serve_taps, opts.calib, engines, pick_device(opts.device), measured)


def _quantize_pruned(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
                     auto_choice: AutoChoiceRecord | None = None, taps: TapsDecision | None = None,
                     measured: TapsMeasurement | None = None) -> QuantizeResult:
    """--draft-vocab (and the --quantize-lm-head refusal): argument errors first, then the pruning pre-pass."""
    from eagle3_quant.lm_head_support import check_quantize_lm_head
    from eagle3_quant.quantize.vocab_prune import vocab_pruned

    draft = _read_served(src, opts)
    if opts.quantize_lm_head:
        check_quantize_lm_head(draft.config.architecture)
    if opts.allow_pickle and pickle_only(draft.path):
        raise SchemeError("--draft-vocab needs a safetensors draft; --allow-pickle converts only unpruned drafts",
                          field="draft_vocab")
    out = check_output_target(Path(out), draft.path, opts.force)
    taps = taps or _serve_taps(draft, opts, measured)
    with vocab_pruned(draft, opts.calib, opts.draft_vocab, out) as (folder, record):
        return _quantize(folder, out, replace(opts, revision=None), command, origin=draft.source,
                         vocab_pruning=record.to_dict(), auto_choice=auto_choice, taps=taps)


def _quantize_smoothed(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
                       progress: Progress = SILENT, measured: TapsMeasurement | None = None) -> QuantizeResult:
    """--smooth-alpha: the smoothed BF16 draft (``quantize/smooth.py``) goes through the normal path."""
    from eagle3_quant.quantize.calibration import CALIBRATION_STEPS
    from eagle3_quant.quantize.smooth import smoothed

    draft = _read_served(src, opts)
    out = check_output_target(Path(out), draft.path, opts.force)
    scan_source(draft)            # a NaN/Inf weight named before smoothing measures anything
    roles = {d.role for d in make_plan(draft, get_scheme(opts.scheme), opts.exclude, opts.quantize_fc).quantized}
    taps = _serve_taps(draft, opts, measured)
    with smoothed(draft, opts.calib, opts.smooth_alpha, roles, out, CALIBRATION_STEPS, taps.indices,
                  progress) as (folder, record):
        return _quantize(folder, out, replace(opts, revision=None), command, origin=draft.source,
                         smoothing=record.to_dict(), taps=taps, progress=progress)


def _quantize_awq(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
                  progress: Progress = SILENT, measured: TapsMeasurement | None = None) -> QuantizeResult:
    """AWQ (w4a16_int4's default): the AWQ-scaled BF16 draft (``quantize/awq.py``) goes through the normal path,
    rounded to nearest there."""
    from eagle3_quant.quantize.awq import awq_scaled
    from eagle3_quant.quantize.calibration import CALIBRATION_STEPS

    draft = _read_served(src, opts)
    out = check_output_target(Path(out), draft.path, opts.force)
    scan_source(draft)            # a NaN/Inf weight named before AWQ measures anything (Quark's LossError otherwise)
    progress.say("AWQ (Quark's): scales and clips searched on the calibration set's rollout first")
    plan = make_plan(draft, get_scheme(opts.scheme), opts.exclude, opts.quantize_fc, engine=opts.engine)
    taps = _serve_taps(draft, opts, measured)
    with awq_scaled(draft, opts.calib, plan, out, CALIBRATION_STEPS, taps.indices, progress) as (folder, record):
        return _quantize(folder, out, replace(opts, revision=None), command, origin=draft.source,
                         smoothing=record.to_dict(), taps=taps, progress=progress)


def _read_served(src: str | Path, opts: QuantizeOptions):
    """The draft, refused in one line when no engine can serve it as asked (--engine auto), or when an engine
    --engine names cannot (its format, the scheme, an FP8 fc; engines/choice.py)."""
    draft = read_draft(src, opts.revision)
    scheme = None if opts.scheme == AUTO_SCHEME else get_scheme(opts.scheme)
    choice = choose_engines(opts.engine, draft.config, draft.format, scheme, opts.quantize_fc)
    check_choice(choice, draft.config, draft.format, scheme, opts.quantize_fc, draft.path / "config.json")
    return draft


def _check_resources(draft, out: Path, plan: QuantPlan, in_memory: bool) -> None:
    quantized = {d.module for d in plan.quantized}
    output_bytes = estimate_output_bytes(draft, quantized, plan.scheme)
    check_resources(draft, out, output_bytes, {m + ".weight" for m in quantized}, per_shard=not in_memory)


def _in_memory(scheme, opts: QuantizeOptions) -> bool:
    """Quark's in-memory path: static input scales, GPTQ, or a layout only its in-memory export writes (INT4)."""
    return scheme.needs_calibration or opts.gptq or not scheme.file_to_file


def _quantize(src: str | Path, out: str | Path, opts: QuantizeOptions, command: list[str],
              origin: DraftSource | None = None,
              vocab_pruning: dict | None = None, auto_choice: AutoChoiceRecord | None = None,
              smoothing: dict | None = None, taps: TapsDecision | None = None,
              progress: Progress = SILENT, measured: TapsMeasurement | None = None) -> QuantizeResult:
    started = time.perf_counter()
    chosen = get_scheme(opts.scheme)
    exclude, quantize_fc, calib, auto_exclude = opts.exclude, opts.quantize_fc, opts.calib, opts.auto_exclude
    timer = StageTimer()
    with timer.stage("read headers"):
        draft = _read_served(src, opts)
        scanned_identities = identities((origin or draft.source).path, draft)   # before any tensor is read
        out = check_output_target(Path(out), draft.path, opts.force)
        plan = make_plan(draft, chosen, exclude, quantize_fc, engine=opts.engine)
        in_memory = _in_memory(chosen, opts) or auto_exclude is not None      # the whole draft at once
        _check_resources(draft, out, plan, in_memory)
        check_vocab_map(draft)
    with timer.stage("serve taps (measured on --calib)" if calib is not None and taps is None else "serve taps"):
        taps = taps or _serve_taps(draft, opts, measured)
        if chosen.needs_calibration or opts.gptq:   # a set of another draft, or without these layers, is refused
            from eagle3_quant.quantize.calibration import check_calibration
            from eagle3_quant.records.calibration import load_calibration

            check_calibration(draft, load_calibration(calib), taps.indices)
    quark_import = import_quark_in_background(opts.verbose)   # overlaps the source scan below
    source = origin or draft.source
    with timer.stage("scan source (sha256 + NaN/Inf)"):
        inputs = scan_source(draft)
        if origin is not None:      # converted from pickle: the manifest lists the files the user gave
            inputs = digest_folder(source.path)
    device = pick_device(opts.device)
    sensitivity = None
    if auto_exclude is not None:
        with timer.stage("auto-exclude sensitivity"):
            sensitivity, reasons = _auto_exclude(draft, chosen.name, plan, calib, auto_exclude, device, taps.indices)
        plan = make_plan(draft, chosen, exclude, quantize_fc, reasons, engine=opts.engine)
        if not plan.quantized:
            raise SchemeError(f"--auto-exclude {auto_exclude} keeps every linear BF16: nothing left to quantize",
                              field="auto_exclude")
        _check_resources(draft, out, plan, in_memory)   # fewer linears quantized: a larger output

    with staged_output(out, draft.path, opts.force) as staging:
        with timer.stage("import quark.torch (wait)"):
            timer.seconds["import quark.torch (background)"] = quark_import.result()[1]
        calibration = gptq = None
        with timer.stage("quark"):
            if _in_memory(chosen, opts):
                from eagle3_quant.quantize.quark_memory import run_in_memory

                made = run_in_memory(draft, plan, calib if chosen.needs_calibration or opts.gptq else None, staging,
                                     device, opts.verbose, gptq=opts.gptq, taps=taps.indices, progress=progress)
                calibration = made.calibration.to_dict() if made.calibration is not None else None
                gptq = made.gptq.to_dict() if made.gptq is not None else None
            else:
                from eagle3_quant.quantize.quark_file import run_file_to_file

                run_file_to_file(draft, plan, staging, device, opts.verbose)
                if device != "cpu" and plan.scheme.weight.kind == "fp8":
                    from eagle3_quant.quantize.cpu_bits import match_cpu_bits

                    match_cpu_bits(draft, staging, plan)     # the bytes a CPU run writes
        with timer.stage("config + side files"):
            for written in staging.glob("*.safetensors"):
                os.chmod(written, 0o644)
            config = rewrite_config(staging / "config.json", draft.config.raw, plan, taps.written)
            copy_side_files(draft.path, staging)
        with timer.stage("verify + sha256 outputs"):
            verified = verify_export(draft, staging, plan)   # after the last write: its digests go in the manifest
        with timer.stage("re-check source (sha256)"):   # after the last read of it: what was used was scanned
            check_source_unchanged(source.path, inputs, scanned_identities, draft)
        loader = check_loader_compat(config["quantization_config"], plan.intended(), **loader_family(draft.config))
        if not loader.ok:
            raise LoaderCompatError("vLLM would not load this as intended: " + "; ".join(loader.problems[:3]),
                                    path=out)
        with timer.stage("manifest"):
            body = _manifest(draft, source, origin, plan, config, device, calibration, sensitivity, vocab_pruning,
                             inputs, smoothing)
            body = replace(body, auto_choice=auto_choice, gptq=gptq, command=command, serve_taps=taps.record)
            manifest = write_manifest(staging, body, verified.files)
            write_local_record(staging, source.path)   # hidden, never published: validate's default reference
    return QuantizeResult(out, manifest, plan, loader, time.perf_counter() - started, timer.seconds)


def _manifest(draft, source: DraftSource, origin: DraftSource | None, plan: QuantPlan, config: dict, device: str,
              calibration: dict | None, sensitivity: dict | None, vocab_pruning: dict | None,
              inputs: list[FileDigest], smoothing: dict | None = None) -> Manifest:
    scheme = plan.scheme
    return Manifest(
        source=SourceRecord(path=public_name(source.path), format=draft.format.value,
                            architecture=draft.config.architecture, hub_id=repo_id_from_cache_path(source.path),
                            repo_id=source.repo_id, revision=source.revision, commit=source.commit,
                            pickle_converted=origin is not None and vocab_pruning is None and smoothing is None,
                            card=source_card_info(source.path)),
        scheme=SchemeRecord(scheme.name, scheme.weight.describe(), scheme.input.describe()),
        exclude=ExcludeRecord(modules=[d.module for d in plan.excluded],
                              vllm_patterns=config["quantization_config"]["exclude"],
                              reasons={d.module: d.reason for d in plan.excluded}),
        layers=[LayerRecord(d.role, d.module, [d.out_features, d.in_features], d.quantize, d.reason)
                for d in plan.decisions],
        inputs=list(inputs), outputs=[], device=device, calibration=calibration, sensitivity=sensitivity,
        vocab_pruning=vocab_pruning, smoothing=smoothing,
        engines=EnginesRecord(**plan.engines.to_dict()) if plan.engines is not None else None)
