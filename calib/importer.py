"""import_calibration: hidden states captured elsewhere (a serving engine, SpecForge) -> a checked calibration set.

Four inputs are understood: a folder in this project's calibration format (``calib.json`` + shards, see
``format.py``), which is checked sample by sample against the draft and copied; SpecForge's offline
hidden-state files (see ``specforge.py``), converted with the target's lm_head; and vLLM's extract_hidden_states
files and speculators' data-generation files (see ``engine_dump.py``), converted with the target's final norm
and lm_head.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from eagle3_quant.calib.dump_formats import ENGINE_FORMATS, DumpFormat
from eagle3_quant.calib.engine_dump import detect_engine_dump
from eagle3_quant.calib.engine_import import engine_dump_source
from eagle3_quant.calib.lm_head import argmax_logits, load_lm_head
from eagle3_quant.calib.options import ImportOptions
from eagle3_quant.calib.result import CalibrationResult, set_bytes
from eagle3_quant.calib.specforge import find_files, is_specforge_dump, read_record
from eagle3_quant.calib.staging import check_inputs_apart
from eagle3_quant.calib.target import check_target, read_target
from eagle3_quant.errors import CalibrationDataError, TargetMismatchError
from eagle3_quant.options import build_options
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.calibration import (
    INDEX_NAME,
    STATE_DTYPES,
    CalibrationInfo,
    CalibrationSample,
    CalibrationWriter,
    load_calibration,
)
from eagle3_quant.taps.capture import CapturePlan, TapRecord, capture_taps, stale_order
from eagle3_quant.taps.conventions import Taps, resolve_taps
from eagle3_quant.taps.engine_rules import DEFAULT_ENGINE, Engine
from eagle3_quant.util.outdir import staged_output
from eagle3_quant.util.progress import SILENT, Progress


def import_calibration(dump: str | Path, draft: str | Path, out: str | Path, options: ImportOptions | None = None,
                       *, progress: Progress = SILENT, **overrides) -> CalibrationResult:
    """Check DUMP against DRAFT (hidden size, taps, vocab, shapes) and write it as the calibration set OUT.

    `options`: an `ImportOptions`; keywords override its fields. Its `target` is needed for SpecForge files (its
    lm_head gives the next tokens) and, for a draft whose config names no aux layer ids, to know the default
    taps; when given it is also checked against the draft. A calibration-format dump must hold the taps `engine`
    feeds the draft (or the ids/convention given); with `engine` None, the engine the dump records, else any
    engine whose taps it holds. SpecForge files hold the taps the draft was trained on; `engine` (default vllm) is
    recorded. vLLM extract_hidden_states and speculators files (`engine_dump.py`) need `target` too (its final
    norm and lm_head give the next tokens); `dump_layer_ids` says which layers they hold. `format` (auto) names
    the dump's format."""
    opts = build_options(ImportOptions, options, overrides)
    target, tap_convention, aux_layer_ids, force = opts.target, opts.tap_convention, opts.aux_layer_ids, opts.force
    shard_samples, shard_bytes, engine = opts.shard_samples, opts.shard_bytes, opts.engine
    started = time.perf_counter()
    dump, out = Path(dump).expanduser().resolve(), Path(out).expanduser().resolve()
    draft_ckpt = read_draft(draft, opts.revision)
    spec = read_target(target) if target is not None else None
    if spec is not None:
        check_target(spec, draft_ckpt.config, str(draft_ckpt.path))
    num_layers = spec.num_layers if spec else None
    hidden, vocab = draft_ckpt.config.target_hidden_size, draft_ckpt.config.vocab_size
    check_inputs_apart(out, draft_ckpt.path)
    fmt = _dump_format(dump, DumpFormat(opts.format))
    if fmt is DumpFormat.calibration:
        source = load_calibration(dump)
        plan = _dump_taps(draft_ckpt.config, num_layers, engine, tap_convention, aux_layer_ids, source.info)
        info = _checked_info(source.info, plan, hidden, dump)
        records, total, stored = source.samples(), source.num_samples, len(source.stored_layers)
    elif fmt in ENGINE_FORMATS:
        taps, info, records, total = engine_dump_source(dump, fmt, draft_ckpt.config, spec, opts)
        stored = len(info.aux_layer_ids)
    else:
        if spec is None:
            raise CalibrationDataError("SpecForge files hold the target's last hidden state, not its predictions",
                                       path=dump, hint="pass --target so its lm_head gives the next tokens")
        files = find_files(dump)
        if not files:
            raise CalibrationDataError("holds no SpecForge data_*.ckpt files (specforge format)", path=dump)
        taps = resolve_taps(draft_ckpt.config, num_layers, tap_convention, aux_layer_ids)
        record = capture_taps(draft_ckpt.config, num_layers, engine or DEFAULT_ENGINE, tap_convention,
                              aux_layer_ids).record
        info = _specforge_info(spec.name, taps, record, hidden, dump, files[0])
        records, total, stored = _from_specforge(files, load_lm_head(spec.name), vocab), len(files), len(taps.indices)
    if total == 0:          # a set of nothing would pass every later check and calibrate nothing
        raise CalibrationDataError(f"holds no sample ({fmt.value} format): nothing to import", path=dump)
    state_dtype = STATE_DTYPES[info.dtype]
    start = time.perf_counter()
    with staged_output(out, dump, force) as staging, progress.task("import", total) as advance:
        writer = CalibrationWriter(staging, info, shard_samples, shard_bytes, mark_incomplete=True)
        for n, sample in enumerate(records):
            where = f"{dump} sample {n}"
            sample.check(hidden, where, stored)
            _check_vocab(sample, vocab, where)
            writer.add(CalibrationSample(sample.input_ids, sample.aux_hidden_states.to(state_dtype),
                                         sample.target_next_ids, sample.generated_from))
            advance(1, int(sample.input_ids.numel()))
        writer.close()
    seconds = time.perf_counter() - start
    calib = load_calibration(out)
    return CalibrationResult(out, calib.num_samples, calib.num_tokens, time.perf_counter() - started,
                             calib.num_tokens / seconds if seconds > 0 else 0.0, calib.info.aux_layer_ids,
                             _convention(calib.info), info.dtype, set_bytes(calib), 0, calib.num_samples,
                             calib.num_tokens, seconds, 0, 0, info.source, calib.info)


def _dump_format(dump: Path, asked: DumpFormat) -> DumpFormat:
    """The format asked for, or (auto) the one the folder holds; a folder holding none of them is refused."""
    if asked is not DumpFormat.auto:
        if not dump.is_dir():
            raise CalibrationDataError("no such folder", path=dump)
        return asked
    if (dump / INDEX_NAME).exists():
        return DumpFormat.calibration
    if is_specforge_dump(dump):
        return DumpFormat.specforge
    found = detect_engine_dump(dump)
    if found:
        return found[0]
    raise CalibrationDataError(f"neither a calibration set ({INDEX_NAME}), SpecForge data_*.ckpt files, vLLM "
                               "extract_hidden_states files nor speculators hs_*.safetensors files", path=dump)


def _convention(info: CalibrationInfo) -> str:
    return str((info.extra or {}).get("tap_convention") or (info.extra or {}).get("training_convention") or "input")


def _dump_taps(config, num_layers, engine, convention, ids, info: CalibrationInfo) -> CapturePlan:
    """The taps a calibration-format dump must hold: the named engine's, the recorded one's, else the first
    engine's it holds (vLLM's when it holds none, for the error)."""
    recorded = TapRecord.from_extra(info.extra or {})
    named = engine or (recorded.engine if recorded and recorded.engine in Engine.__members__ else None)
    layers = num_layers if num_layers is not None else (recorded.target_layers if recorded else None)
    if named:
        return capture_taps(config, layers, named, convention, ids)
    plans = [capture_taps(config, layers, e, convention, ids) for e in Engine]
    held = set(info.aux_layer_ids)
    return next((p for p in plans if set(p.taps.indices) <= held), plans[0])


def _checked_info(info: CalibrationInfo, plan: CapturePlan, hidden: int, dump: Path) -> CalibrationInfo:
    """The dump holds the engine's taps (it may hold more: every candidate's); its record, with the candidates
    it can rebuild."""
    taps = plan.taps
    if info.target_hidden_size != hidden:
        raise TargetMismatchError(f"the dump holds states of hidden size {info.target_hidden_size}, the draft "
                                  f"expects {hidden}", path=dump, field="target_hidden_size")
    held = list(info.aux_layer_ids)
    if held != sorted(set(held)) or not set(taps.indices) <= set(held):
        raise TargetMismatchError(
            f"the dump holds hidden_states{list(info.aux_layer_ids)}, the draft reads hidden_states"
            f"{list(taps.indices)} (ids {list(taps.ids)}, {taps.convention.value} convention, from {taps.origin})",
            path=dump, field="aux_layer_ids",
            hint=stale_order(info.aux_layer_ids, taps.indices) or "check --tap-convention or --aux-layer-ids")
    if info.dtype not in STATE_DTYPES:
        raise CalibrationDataError(f"dtype {info.dtype!r} is not one of {', '.join(STATE_DTYPES)}", path=dump,
                                   field="dtype")
    held = set(info.aux_layer_ids)
    candidates = tuple(c for c in plan.record.candidates if set(c.indices) <= held)
    record = replace(plan.record, candidates=candidates)
    return CalibrationInfo(info.target, info.aux_layer_ids, info.target_hidden_size, info.dtype, info.source,
                           {**info.extra, **record.extra(), "imported_from": str(dump)})


def _specforge_info(target: str, taps: Taps, record: TapRecord, hidden: int, dump: Path,
                    first: Path) -> CalibrationInfo:
    dtype = str(read_record(first).aux_hidden_state.dtype).removeprefix("torch.")
    record = replace(record, candidates=tuple(c for c in record.candidates if set(c.indices) <= set(taps.indices)))
    return CalibrationInfo(target, taps.indices, hidden, dtype if dtype in STATE_DTYPES else "float32",
                           f"specforge:{dump}", {"imported_from": str(dump), "format": "specforge-offline",
                                                 "tap_convention": taps.convention.value,
                                                 "draft_aux_layer_ids": list(taps.ids), **record.extra(),
                                                 "taps_note": "SpecForge files do not record their taps: "
                                                              "assumed to be the draft's"})


def _from_specforge(files: list[Path], lm_head: torch.Tensor, vocab: int):
    if lm_head.shape[0] != vocab:
        raise TargetMismatchError(f"the target's lm_head has {lm_head.shape[0]} rows, the draft's target vocab is "
                                  f"{vocab}", field="vocab_size")
    for file in files:
        record = read_record(file)
        if record.hidden_state.shape[-1] != lm_head.shape[1]:
            raise TargetMismatchError(f"hidden_state width {record.hidden_state.shape[-1]} does not match the "
                                      f"target's lm_head ({lm_head.shape[1]})", path=file, field="hidden_state")
        yield CalibrationSample(record.input_ids, record.aux_hidden_state,
                                argmax_logits(record.hidden_state, lm_head))


def _check_vocab(sample: CalibrationSample, vocab: int, where: str) -> None:
    for name in ("input_ids", "target_next_ids"):
        ids = getattr(sample, name)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise TargetMismatchError(f"{name} has ids outside the target vocab 0..{vocab - 1}", path=where,
                                      field=name)
