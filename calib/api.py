"""calibrate_target: prompts from a dataset -> the target's aux hidden states and next tokens -> a calibration set."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from eagle3_quant.calib.backends import Backend
from eagle3_quant.calib.disk_room import check_capture_room
from eagle3_quant.calib.engine_preflight import check_writable, engine_preflight
from eagle3_quant.calib.options import CalibrationOptions
from eagle3_quant.calib.prompts import PromptSpec, sample_prompts
from eagle3_quant.calib.result import DTYPE_BYTES, CalibrationResult, estimate_bytes, set_bytes
from eagle3_quant.calib.staging import ResumableOutput, check_inputs_apart, finished_set
from eagle3_quant.calib.target import check_servable, check_target, load_tokenizer, read_target
from eagle3_quant.calib.transformers_capture import capture_with_transformers
from eagle3_quant.calib.vllm_capture import (
    capture_with_vllm,
    check_engine_layout,
    export_dir,
    find_vllm,
    with_engine,
)
from eagle3_quant.options import build_options
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.target_precision import TargetPrecision
from eagle3_quant.records.calibration import CalibrationInfo, load_calibration
from eagle3_quant.taps.capture import CapturePlan, capture_taps
from eagle3_quant.taps.conventions import Taps
from eagle3_quant.util.formatting import human_bytes
from eagle3_quant.util.progress import SILENT, Progress


def _data_name(data: str | Path) -> str:
    path = Path(data).expanduser()
    return str(path.resolve()) if path.exists() else str(data)


def calibrate_target(target: str | Path, draft: str | Path, data: str | Path, out: str | Path,
                     options: CalibrationOptions | None = None, *, progress: Progress = SILENT,
                     **overrides) -> CalibrationResult:
    """Capture what DRAFT receives from TARGET on prompts from DATA into the calibration set OUT.

    `options`: a `CalibrationOptions` (num_samples, seq_len, seed, column, generate_tokens, tap_convention,
    aux_layer_ids, dtype, trust_remote_code, force, revision, backend, ...); keywords override its fields. With
    backend "vllm" the target runs in vLLM's engine (`vllm_capture.py`), else in transformers here. Re-running the
    same call after a kill resumes; OUT appears only when complete. `progress` receives the plan and the counts."""
    started = time.perf_counter()
    opts = build_options(CalibrationOptions, options, overrides)
    engine = find_vllm(opts.engine_python) if opts.backend == Backend.vllm else None   # refused before any work
    force = opts.force
    out = Path(out).expanduser().resolve()
    draft_ckpt = read_draft(draft, opts.revision)
    spec = read_target(target, opts.trust_remote_code, opts.target_quantization)
    check_inputs_apart(out, draft_ckpt.path, Path(spec.name))
    check_target(spec, draft_ckpt.config, str(draft_ckpt.path))
    plan = capture_taps(draft_ckpt.config, spec.num_layers, opts.engine, opts.tap_convention, opts.aux_layer_ids)
    check_servable(spec, engine.info if engine else None)
    if engine:           # before the engine starts: what `bench` checks too (the taps were checked just above)
        tokenizer = engine_preflight(out, spec, {}, trust_remote_code=opts.trust_remote_code)
        check_engine_layout(engine, spec, plan.indices, spec.dtype if opts.dtype == "auto" else opts.dtype, opts,
                            out)
    else:
        tokenizer = load_tokenizer(spec, opts.trust_remote_code)
        check_writable(out)
    prompt_spec = PromptSpec(_data_name(data), opts.num_samples, opts.seq_len, opts.seed, opts.column, opts.split,
                             opts.subset, opts.min_tokens, opts.generate_tokens)
    prompts = sample_prompts(prompt_spec, tokenizer)
    dtype = spec.dtype if opts.dtype == "auto" else opts.dtype
    info = _info(spec.name, draft_ckpt.source.describe(), plan, spec.hidden_size, dtype, prompt_spec,
                 prompts.column.name, prompts.fingerprint(), spec.precision)
    info = with_engine(info, engine, opts.layout()) if engine else info

    done = finished_set(out, info, force)
    if done is not None:
        progress.say(f"{out} already holds this calibration set ({done.num_samples} samples): nothing to do")
        return _result(out, info, plan.taps, started, 0, 0, 0.0, 0, 0, done.num_samples)

    max_tokens = prompts.tokens + len(prompts.prompts) * opts.generate_tokens
    est_bytes = estimate_bytes(max_tokens, spec.hidden_size, dtype, len(plan.indices))
    target_output = ResumableOutput(out, info, force, opts.shard_samples, opts.shard_bytes)
    check_capture_room(out, target_output.staging, est_bytes, max_tokens, len(plan.indices), spec.hidden_size,
                       DTYPE_BYTES[dtype], copies=2 if engine else 1)
    writer = target_output.open()
    try:
        if engine and force:      # under the run's lock: the engine's export of an earlier run starts over too
            shutil.rmtree(export_dir(out), ignore_errors=True)
        resumed = writer.count
        for line in _plan_lines(spec, plan, prompts, max_tokens, est_bytes, resumed, target_output.staging):
            progress.say(line)          # one line each: a value in one can never start another
        if writer.discarded:
            progress.say(f"{len(writer.discarded)} shard(s) of the interrupted run differ from the sha256 recorded "
                         f"when written, from {writer.discarded[0]} on: captured again")
        if engine:
            captured = capture_with_vllm(engine, out, spec, plan.indices, dtype, opts, tokenizer,
                                         prompts.prompts[resumed:], writer, progress, len(prompts.prompts), resumed)
        else:
            captured = capture_with_transformers(spec, plan.indices, dtype, opts, tokenizer,
                                                 prompts.prompts[resumed:], writer, progress, len(prompts.prompts),
                                                 resumed)
        target_output.finish(writer)
    finally:
        target_output.close()
    return _result(out, info, plan.taps, started, *captured, resumed)


def _info(target: str, draft: str, plan: CapturePlan, hidden: int, dtype: str, spec: PromptSpec,
          column: str, fingerprint: str, precision: TargetPrecision) -> CalibrationInfo:
    extra = {"draft": draft, "tap_convention": plan.taps.convention.value, "draft_aux_layer_ids": list(plan.taps.ids),
             **plan.record.extra(),
             "column": column, "split": spec.split, "subset": spec.subset, "num_samples": spec.num_samples,
             "seq_len": spec.seq_len, "seed": spec.seed, "min_tokens": spec.min_tokens,
             "generate_tokens": spec.generate_tokens, "prompts_sha256": fingerprint,
             **({"target_precision": precision.to_dict()} if precision.quantized else {})}
    return CalibrationInfo(target, plan.indices, hidden, dtype, spec.data, extra)


def _plan_lines(spec, plan: CapturePlan, prompts, max_tokens: int, est_bytes: int, resumed: int,
                staging: Path) -> list[str]:
    taps = plan.taps
    lines = [f"target {spec.name}: {spec.architecture}, {spec.num_layers} layers, hidden {spec.hidden_size}",
             f"taps hidden_states{list(taps.indices)} (draft ids {list(taps.ids)}, {taps.convention.value} "
             f"convention, from {taps.origin})",
             *(f"candidate {c.name}: hidden_states{list(c.indices)}" for c in plan.record.candidates
               if len(plan.record.candidates) > 1),
             f"capturing hidden_states{list(plan.indices)} in one pass",
             f"{len(prompts.prompts)} prompts from {prompts.dataset_rows} rows of column {prompts.column.name!r} "
             f"({prompts.rows_skipped} skipped as too short, {prompts.truncated} truncated); up to {max_tokens:,} "
             f"tokens, about {human_bytes(est_bytes)} on disk"]
    lines.extend(plan.record.notes)
    if resumed:
        lines.append(f"resuming an interrupted run at sample {resumed} ({staging})")
    return lines


def _result(out: Path, info: CalibrationInfo, taps: Taps, started: float, captured: int, tokens: int,
            seconds: float, generated: int, cut: int, resumed: int) -> CalibrationResult:
    calib = load_calibration(out)
    return CalibrationResult(out, calib.num_samples, calib.num_tokens, time.perf_counter() - started,
                             tokens / seconds if seconds > 0 else 0.0, calib.info.aux_layer_ids,
                             taps.convention.value,
                             info.dtype, set_bytes(calib), resumed, captured, tokens, seconds, generated, cut,
                             info.source, calib.info)
