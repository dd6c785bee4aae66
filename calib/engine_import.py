"""vLLM / speculators hidden-state files (see `engine_dump.py`) -> calibration samples, checked against the draft and
the target: the layer count and ids, the taps, the hidden width, the token ids (finite states: `engine_dump.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from eagle3_quant.calib.dump_formats import DumpFormat
from eagle3_quant.calib.engine_dump import DumpLayout, dump_layout, engine_files, read_engine_record
from eagle3_quant.calib.final_norm import TargetHead, load_target_head
from eagle3_quant.calib.target import TargetSpec
from eagle3_quant.errors import CalibrationDataError, TargetMismatchError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.records.calibration import STATE_DTYPES, CalibrationInfo, CalibrationSample
from eagle3_quant.taps.capture import capture_taps
from eagle3_quant.taps.engine_rules import DEFAULT_ENGINE, Engine


def _taps_and_layout(config: DraftConfig, spec: TargetSpec, opts, stored: int, where: Path):
    """The engine's taps for the draft (or the ids/convention given), what to store, and the dump's layout.
    Without dump ids the dump is taken to hold every candidate's layers plus the final one, else the engine's
    taps plus the final one (whichever count matches); with no engine named and dump ids given: the first
    engine whose taps the dump holds. Every candidate the dump holds is stored."""
    engines = [opts.engine] if opts.engine else [DEFAULT_ENGINE.value, *(e.value for e in Engine
                                                                            if e is not DEFAULT_ENGINE)]
    first_error = None
    for engine in engines:
        plan = capture_taps(config, spec.num_layers, engine, opts.tap_convention, opts.aux_layer_ids)
        guesses = [plan.taps.indices] if opts.dump_layer_ids is not None else [plan.indices, plan.taps.indices]
        for needed in dict.fromkeys(guesses):
            try:
                layout = dump_layout(needed, spec.num_layers, opts.dump_layer_ids, stored, where)
            except TargetMismatchError as exc:      # named for the engine's own taps, the least the draft needs
                first_error = exc if needed == plan.taps.indices and first_error is None else first_error
                continue
            held = set(layout.layer_ids)
            candidates = tuple(c for c in plan.record.candidates if set(c.indices) <= held)
            keep = tuple(sorted({*plan.taps.indices, *(i for c in candidates for i in c.indices)}))
            return plan.taps, replace(plan.record, candidates=candidates), layout, keep
        if opts.dump_layer_ids is None:
            break          # the layout was derived from these taps: another engine's would not help
    raise first_error


def engine_dump_source(dump: Path, fmt: DumpFormat, config: DraftConfig, spec: TargetSpec | None, opts):
    """(taps, info, samples iterator, count) for a vLLM or speculators dump."""
    if spec is None:
        raise CalibrationDataError(f"{fmt.value} files hold the target's states, not its predictions", path=dump,
                                   hint="pass --target: its final norm and lm_head give the next tokens")
    files = engine_files(dump, fmt)
    first = read_engine_record(files[0])
    stored, hidden = first.hidden_states.shape[1], first.hidden_states.shape[2]
    if hidden != config.target_hidden_size:
        raise TargetMismatchError(f"hidden_states are {hidden} wide, the draft expects target hidden size "
                                  f"{config.target_hidden_size}", path=files[0], field="hidden_states")
    taps, record, layout, keep = _taps_and_layout(config, spec, opts, stored, files[0])
    dtype = str(first.hidden_states.dtype).removeprefix("torch.")
    info = CalibrationInfo(spec.name, keep, hidden, dtype if dtype in STATE_DTYPES else "float32",
                           f"{fmt.value}:{dump}",
                           {"imported_from": str(dump), "format": f"{fmt.value}-hidden-states",
                            "dump_layer_ids": list(layout.layer_ids), "dump_layer_ids_origin": layout.origin,
                            "tap_convention": taps.convention.value, "draft_aux_layer_ids": list(taps.ids),
                            **record.extra()})
    head = load_target_head(spec.name)
    if head.lm_head.shape[0] != config.vocab_size:
        raise TargetMismatchError(f"the target's lm_head has {head.lm_head.shape[0]} rows, the draft's target vocab "
                                  f"is {config.vocab_size}", path=spec.name, field="vocab_size")
    if head.lm_head.shape[1] != hidden:
        raise TargetMismatchError(f"the target's lm_head reads width {head.lm_head.shape[1]}, the dump's states are "
                                  f"{hidden} wide", path=spec.name, field="hidden_size")
    return taps, info, _samples(files, layout, keep, spec.num_layers, head, stored, hidden), len(files)


def _samples(files: list[Path], layout: DumpLayout, taps: tuple[int, ...], num_layers: int, head: TargetHead,
             stored: int, hidden: int) -> Iterator[CalibrationSample]:
    positions = [layout.position(i) for i in taps]
    final = layout.position(num_layers)
    for file in files:
        record = read_engine_record(file)
        if tuple(record.hidden_states.shape[1:]) != (stored, hidden):
            raise CalibrationDataError(f"hidden_states are [seq, {record.hidden_states.shape[1]}, "
                                       f"{record.hidden_states.shape[2]}], the dump's first file [seq, {stored}, "
                                       f"{hidden}]", path=file, field="hidden_states")
        states = record.hidden_states
        ids = record.token_ids
        if int(ids.min()) < 0 or int(ids.max()) >= head.lm_head.shape[0]:
            raise TargetMismatchError(f"token_ids has ids outside the target vocab 0..{head.lm_head.shape[0] - 1}",
                                      path=file, field="token_ids")
        aux = states[:, positions].reshape(states.shape[0], len(positions) * hidden)
        yield CalibrationSample(ids, aux, head.next_ids(states[:, final]))
