"""`quantize --scheme auto`: measure the ladder (``auto_ladder.py``) cheapest draft step first on the calibration set
and write the first candidate that keeps the gate; the rest are not measured (``--measure-all`` measures them).

The gate (``records.auto_choice.GATE_RULE``) is what `validate` then confirms on the written artifact with the same
set: the 95% interval's lower bound of the acceptance ratio (candidate / BF16 draft, paired bootstrap over samples)
keeps ``--min-acceptance-ratio``, and the scheme's own `validate` gates hold (``scheme_gates.py``: the point ratio,
step-0 top-1 agreement, lowest weight SQNR). A set too small to tell, where a ratio clears the gate but its
interval does not, is refused with the number of samples that would tell. With ``--device-profile`` only the
schemes that device runs natively are measured. How a candidate is measured: ``auto_measure.py``. A pruned
vocabulary is ranked and measured on the same set: its coverage and ratio are in-sample (optimistic); judge them
on held-out data with `validate --calib OTHER`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from eagle3_quant.devices import DeviceProfile
from eagle3_quant.errors import AcceptanceGateError, CalibrationDataError, Eagle3QuantError
from eagle3_quant.quantize.auto_ladder import Candidate, Ladder, build_ladder, vocab_sizes
from eagle3_quant.quantize.auto_measure import Measurer, Trial, in_memory
from eagle3_quant.quantize.auto_time import MeasuringCost, Stopwatch
from eagle3_quant.quantize.calibration import CALIBRATION_STEPS
from eagle3_quant.quantize.quark_import import importing_in_background
from eagle3_quant.quantize.vocab_prune import current_target_ids, target_token_counts
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.auto_choice import GATE_RULE, KEPT, NOT_MEASURED, AutoCandidateRecord, AutoChoiceRecord
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.records.public_names import public_name
from eagle3_quant.runtime.acceptance import Chains, acceptance_stats
from eagle3_quant.runtime.serving import serving_numerics
from eagle3_quant.scheme_gates import gates_for_scheme
from eagle3_quant.schemes import get_scheme
from eagle3_quant.util.formatting import interval
from eagle3_quant.util.progress import SILENT, Progress, clock

AUTO_K = CALIBRATION_STEPS      # draft steps per chain: vLLM's usual num_speculative_tokens, validate's default k
MIN_SAMPLES = 8                 # fewer: a bootstrap over samples has no interval worth gating on
PROBE_SHARE = 4                 # each candidate first on 1/4 of the samples: stopped there when clearly failing
PROBE_MIN_SAMPLES = 8


@dataclass(frozen=True)
class AutoSettings:
    gate: float
    engine: str
    device: str
    profile: DeviceProfile | None = None
    measure_all: bool = False
    serve_taps: str = "trained"      # what a candidate Quark writes is written with, as the chosen one
    write: Callable[..., object] | None = None     # write(src, out, options): how Quark writes a rung (api.py)


@dataclass(frozen=True)
class Outcome:
    candidate: Candidate
    trial: Trial | None
    status: str                 # KEPT, "missed: ...", NOT_MEASURED or "left out: ..."

    @property
    def keeps(self) -> bool:
        return self.status == KEPT


def misses(trial: Trial, gate: float) -> list[str]:
    """The gates a measured candidate misses: --min-acceptance-ratio on the interval's lower bound, and its
    scheme's `validate` gates on the point ratio, the top-1 agreement and the lowest weight SQNR."""
    if trial.paired is None or math.isnan(trial.paired.ratio):
        return ["no measurable chain"]
    own = gates_for_scheme(trial.candidate.scheme)
    found = []
    if not trial.paired.low >= gate:
        found.append(f"lower bound {trial.paired.low:.4f} < {gate}")
    if not trial.paired.ratio >= own.min_acceptance_ratio:
        found.append(f"ratio {trial.paired.ratio:.4f} < {own.min_acceptance_ratio} (validate)")
    if not trial.top1 >= own.min_top1_agreement:
        found.append(f"top-1 {trial.top1:.3f} < {own.min_top1_agreement} (validate)")
    if trial.min_sqnr_db is not None and not trial.min_sqnr_db >= own.min_weight_sqnr_db:
        found.append(f"weight SQNR {trial.min_sqnr_db:.1f} dB < {own.min_weight_sqnr_db} (validate)")
    return found


def samples_needed(trial: Trial, gate: float, samples: int) -> int | None:
    """Samples that would narrow the interval of a ratio above the gate until its lower bound clears it (the
    half-width shrinks as 1/sqrt(samples)); None when the ratio itself does not clear the gate."""
    ratio, low = trial.paired.ratio, trial.paired.low
    if not ratio > gate:
        return None
    return math.ceil(samples * ((ratio - low) / (ratio - gate)) ** 2)


def _line(o: Outcome, index: int, total: int, left: float | None, until_keeper: bool) -> str:
    """`until_keeper`: the time left counts every rung, though the first keeper ends the run."""
    t = o.trial
    ratio = ("not drafted" if t.probed == 0 else "no measurable chain") if t.paired is None else \
        f"ratio {t.paired.ratio:.4f} ({interval(t.paired.low, t.paired.high)}), top-1 {t.top1:.3f}"
    when = "" if left is None else f"; {'up to about' if until_keeper else 'about'} {clock(left)} left"
    return f"  {index}/{total} {o.candidate.name}: {ratio}: {o.status} ({t.seconds:.1f} s{when})"


def measure_ladder(measurer: Measurer, ladder: Ladder, settings: AutoSettings, samples: int,
                   progress: Progress = SILENT, reference_s: float = 0.0) -> list[Outcome]:
    """Cheapest first; after the first keeper the rest are not measured (unless measure_all). A candidate whose
    weight SQNR misses its scheme's gate is not drafted; the others are first measured on a quarter of the samples
    and stopped there when they clearly fail (``auto_measure.clearly_failing``); measure_all measures every sample
    of every candidate."""
    runnable = [c for c in ladder.candidates if c.left_out is None]
    probe = None if settings.measure_all else \
        samples if samples < 2 * PROBE_MIN_SAMPLES else max(PROBE_MIN_SAMPLES, samples // PROBE_SHARE)
    progress.say(f"--scheme auto: {len(runnable)} of {len(ladder.candidates)} candidates to measure, cheapest "
                 f"first{'' if settings.measure_all else ' up to the first that keeps the gate'}, on {samples} "
                 "samples; the BF16 draft first")
    reasons: dict[str, list[str]] = {}
    for cand in ladder.candidates:
        if cand.left_out is not None:
            reasons.setdefault(cand.left_out, []).append(cand.name)
    for reason, names in reasons.items():
        progress.say(f"  left out, {reason}: {', '.join(names)}")
    outcomes, kept = [], False
    with progress.task("--scheme auto", samples * (1 + len(runnable)), unit="samples") as advance:
        def tick() -> None:
            advance(1, 0)

        watch = Stopwatch(importing_in_background)
        drafted_here = not measurer.has_reference()
        if not acceptance_stats(measurer.drafts(tick).accepted, AUTO_K).drafts:
            raise _no_chains()            # no candidate could be rated: refused before measuring any
        cost = MeasuringCost(samples)
        cost.add_drafting(samples, watch.elapsed_alone() if drafted_here else reference_s)

        def left_after(index: int) -> float | None:
            keys, rungs = set(), []
            for c in runnable[index:]:
                key = measurer.weights_key(c)
                rungs.append((not in_memory(get_scheme(c.scheme)), measurer.prepared(c) or key in keys))
                keys.add(key)
            return cost.left(rungs)

        done = 0
        for cand in ladder.candidates:
            if cand.left_out is not None:
                outcomes.append(Outcome(cand, None, f"left out: {cand.left_out}"))
                continue
            if kept and not settings.measure_all:
                outcomes.append(Outcome(cand, None, NOT_MEASURED))
                continue
            if measurer.writes(cand):
                progress.say(f"  {cand.scheme}{' with fc' if cand.quantize_fc else ''}: Quark writes it to a "
                             "temporary folder first (its scales come from Quark's own run)")
            built_here = not measurer.prepared(cand)
            done += 1
            watch = Stopwatch(importing_in_background)
            try:
                trial = measurer.measure(cand, tick, probe, settings.gate)
            except Eagle3QuantError as exc:      # quantize refuses to write it (its own check, before any work)
                outcomes.append(Outcome(cand, None, f"left out: quantize refuses it: {exc.message}"))
                continue
            cost.add_rung(samples if trial.probed is None else trial.probed, watch.alone(trial.seconds),
                          watch.alone(trial.prepared_s) if built_here else None,
                          not in_memory(get_scheme(cand.scheme)))
            if trial.probed is not None:
                for _ in range(samples - trial.probed):     # the samples it was spared, so the bar stays true
                    tick()
                where = "before any sample" if not trial.probed else \
                    f"stopped after {trial.probed} of {samples} samples"
                outcomes.append(Outcome(cand, trial, f"missed: {where}: {trial.stopped}"))
            else:
                missed = misses(trial, settings.gate)
                outcomes.append(Outcome(cand, trial, KEPT if not missed else "missed: " + "; ".join(missed)))
                kept = kept or not missed
            left = 0.0 if kept and not settings.measure_all else left_after(done)
            progress.say(_line(outcomes[-1], done, len(runnable), left, not (kept or settings.measure_all)))
    return outcomes


def _no_chains() -> AcceptanceGateError:
    return AcceptanceGateError("--scheme auto: no chain start in the calibration set is a greedy continuation of the "
                               "target, so no acceptance ratio can be measured (calibrate with generated tokens)",
                               field="calib")


def choose(outcomes: list[Outcome], gate: float, samples: int) -> Outcome:
    """The cheapest candidate keeping the gate (the list is in ascending step bytes); else one clear error that
    says, for a set too small to tell, how many samples would."""
    kept = next((o for o in outcomes if o.keeps), None)
    if kept is not None:
        return kept
    rated = [o for o in outcomes if o.trial is not None and o.trial.paired is not None
             and not math.isnan(o.trial.paired.ratio)]
    if not rated:
        raise _no_chains()
    close = [(o, n) for o in rated if (n := samples_needed(o.trial, gate, samples))
             and all(m.startswith("lower bound") for m in misses(o.trial, gate))]
    if close:
        o, needed = close[0]
        p = o.trial.paired
        raise AcceptanceGateError(f"--scheme auto: {samples} calibration samples are too few to tell: the cheapest "
                                  f"candidate whose ratio clears --min-acceptance-ratio {gate}, {o.candidate.name}, "
                                  f"has {p.ratio:.4f} (95% CI {interval(p.low, p.high)}); about {needed} samples "
                                  f"would lift the interval above it (calibrate --num-samples {needed}); nothing "
                                  "written", field="calib")
    best = max(rated, key=lambda o: o.trial.paired.ratio)
    p = best.trial.paired
    raise AcceptanceGateError(f"--scheme auto: no candidate keeps the gate (--min-acceptance-ratio {gate} on the "
                              f"interval's lower bound, and validate's); the best ratio, {best.candidate.name}'s "
                              f"{p.ratio:.4f} (95% CI {interval(p.low, p.high)}), {best.status}; nothing written",
                              field="min_acceptance_ratio")


def _row(o: Outcome, ladder: Ladder, chosen: Outcome) -> AutoCandidateRecord:
    c, t = o.candidate, o.trial
    p = t.paired if t is not None else None
    return AutoCandidateRecord(
        name=c.name, scheme=c.scheme, draft_vocab=c.draft_vocab, quantize_fc=c.quantize_fc,
        step_bytes=c.step_bytes, step_bytes_over_bf16=c.step_bytes / ladder.bf16_step_bytes,
        acceptance_ratio=p.ratio if p is not None else None, interval=[p.low, p.high] if p is not None else None,
        coverage=t.coverage if t is not None else None, keeps_gate=o.keeps, chosen=o is chosen,
        engines=list(c.engines), status=o.status,
        top1_agreement=t.top1 if t is not None and not math.isnan(t.top1) else None,
        min_weight_sqnr_db=t.min_sqnr_db if t is not None else None, native_devices=list(c.native_devices))


def run_auto(draft: DraftCheckpoint, calib_path: Path, calibration: CalibrationSet, exclude,
             settings: AutoSettings, progress: Progress = SILENT, reference: Chains | None = None,
             reference_s: float = 0.0) -> tuple[Candidate, AutoChoiceRecord]:
    """Build the ladder, measure it, choose: (the candidate to write, the manifest's record). `reference`: the BF16
    draft's chains on `calibration` with AUTO_K steps, when already drafted (in `reference_s` seconds)."""
    started = time.perf_counter()
    samples = calibration.num_samples
    if samples < MIN_SAMPLES:
        raise CalibrationDataError(f"--scheme auto gates on a 95% interval over samples: {samples} samples cannot "
                                   f"tell one; give at least {MIN_SAMPLES} (calibrate --num-samples)",
                                   path=calib_path, field="samples")
    counts = target_token_counts(calib_path, draft.config.vocab_size)
    ranked = int((counts[current_target_ids(draft)] > 0).sum())
    sizes, left_out = vocab_sizes(draft.config.draft_vocab_size, ranked)
    ladder = build_ladder(draft, exclude, settings.engine, sizes, profile=settings.profile)
    ladder = replace(ladder, skipped=(*left_out, *ladder.skipped))
    measurer = Measurer(draft, calibration, calib_path, counts, exclude, settings.engine, settings.device, AUTO_K,
                        settings.serve_taps, settings.write, reference)
    try:
        with torch.no_grad():
            outcomes = measure_ladder(measurer, ladder, settings, samples, progress, reference_s)
    finally:
        measurer.close()
    chosen = choose(outcomes, settings.gate, samples)
    reference = measurer.reference_stats()
    record = AutoChoiceRecord(
        min_acceptance_ratio=settings.gate, gate=GATE_RULE, engine=settings.engine, k=AUTO_K,
        calibration=public_name(calib_path), prediction=serving_numerics(draft.config.torch_dtype).record(),
        drafts=reference.drafts, acceptance_length_bf16=reference.acceptance_length,
        bf16_step_bytes=ladder.bf16_step_bytes, candidates=[_row(o, ladder, chosen) for o in outcomes],
        chosen=chosen.candidate.name, seconds=time.perf_counter() - started, skipped=list(ladder.skipped),
        device_profile=settings.profile.name if settings.profile is not None else None,
        measure_all=settings.measure_all, samples=samples)
    return chosen.candidate, record
