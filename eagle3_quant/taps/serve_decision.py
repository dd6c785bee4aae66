"""`quantize --serve-taps trained|as-is`: which target layers the artifact is served with, decided from the config and
the acceptance measured under each candidate (the measuring is `quantize`'s, ``quantize/serve_taps.py``).

`trained` (default): the layers the draft was trained on, known from the config's convention (nested ids count
layer outputs, SpecForge; top-level ids count inputs, speculators) or measured: with a calibration set that holds
the candidates (`calibrate` stores them all), the BF16 draft's acceptance is measured under each one, and a
candidate that beats the convention's with a paired 95% interval above 1 replaces it; a draft without ids takes
the best measured candidate, and without a measurement it is refused (no engine default is published silently).
The ids are then written so that every engine named feeds those layers (``taps/written_ids.served_config``):
vLLM's top-level key, SGLang's nested one; no weight changes. `as-is` writes the ids unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.public_names import public_name
from eagle3_quant.records.serve_taps import MeasuredTaps, ServeTapsRecord
from eagle3_quant.taps.candidates import TapCandidate, tap_candidates, trained_taps
from eagle3_quant.taps.conventions import AUX_KEY, resolve_taps
from eagle3_quant.taps.engine_rules import engine_feeds
from eagle3_quant.taps.written_ids import served_config
from eagle3_quant.util.formatting import interval

TAPS_K = 3          # draft steps per chain, as `validate` measures by default


@dataclass(frozen=True)
class TapsDecision:
    indices: tuple[int, ...] | None       # the layers the artifact is served with (the calibration view)
    written: dict = field(default_factory=dict)   # config field -> value to write
    record: ServeTapsRecord | None = None


def _best(measured: list, trained) -> tuple[TapCandidate | None, str]:
    """The measured candidate to serve, and why; None when nothing could be judged."""
    from eagle3_quant.runtime.acceptance import acceptance_stats, paired_ratio

    judged = [(c, counts) for c, counts in measured if acceptance_stats(counts, TAPS_K).drafts]
    if not judged:
        return None, "no chain could be judged (calibrate with generated tokens)"
    lengths = {c.indices: acceptance_stats(counts, TAPS_K).acceptance_length for c, counts in judged}
    best, best_counts = max(judged, key=lambda item: lengths[item[0].indices])
    if trained is None:
        return best, (f"measured: hidden_states{list(best.indices)} ({best.name}) drafts best, acceptance length "
                      f"{lengths[best.indices]:.3f} at k={TAPS_K}")
    own = next(((c, counts) for c, counts in judged if c.indices == trained.indices), None)
    if own is None or best.indices == trained.indices:
        return None, ""
    ratio = paired_ratio(own[1], best_counts)
    if ratio.low > 1:
        return best, (f"measured: hidden_states{list(best.indices)} ({best.name}) drafts better than the config's "
                      f"convention, hidden_states{list(trained.indices)}: acceptance length "
                      f"{lengths[best.indices]:.3f} vs {lengths[trained.indices]:.3f} "
                      f"(ratio {ratio.ratio:.4f}, 95% CI {interval(ratio.low, ratio.high)})")
    return None, ""


# SafeAILab EAGLE-3's modeling_llama_kv.py appends the input of layers 2, L//2 and L-3 (hidden_states[2, L//2, L-3]),
# which are the layers vLLM feeds a draft that names no ids (its Eagle3 defaults, counted as layer inputs)
EAGLE_CONVENTION = ("original EAGLE format without ids: its training code (SafeAILab EAGLE-3) taps the inputs of "
                    "layers 2, L//2 and L-3, the layers vLLM feeds a draft naming no ids; nothing written (--calib "
                    "CAL measures the candidates instead)")


def _no_ids_error(draft: DraftCheckpoint, why: str) -> DraftFormatError:
    return DraftFormatError(f"the draft names no aux layer ids, so every engine feeds it its default layers "
                            f"(2, L//2, L-3), which need not be the ones it was trained on; {why}",
                            path=draft.path / "config.json", field=AUX_KEY,
                            hint="give --calib CAL (made by `eagle3-quant calibrate`, which stores every candidate) "
                                 "to measure them, or --serve-taps as-is to publish on the engines' defaults")


def decide(draft: DraftCheckpoint, mode: str, engines: tuple[str, ...], layers: int | None, measured: list,
           unmeasured: str, calib_path: Path | None) -> TapsDecision:
    """The layers to serve the artifact with, what to write for them, and the manifest's record, given the target's
    depth and the BF16 draft's acceptance under each candidate (`measured`: (candidate, accepted counts per sample);
    `unmeasured`: why the candidates were not measured, or "")."""
    config = draft.config
    trained = trained_taps(config, layers)
    feeds = {f.reader: f for f in engine_feeds(config, layers)}
    final_unknown = config.aux_includes_final_layer and layers is None
    if mode == "as-is" or final_unknown:
        served = feeds["vllm"].indices if feeds["vllm"].problem is None else None
        reason = ("--serve-taps as-is: the ids as the source wrote them, each engine reading them its own way"
                  if mode == "as-is" else "the draft also reads the target's final layer, whose index needs the "
                  "target's depth (give --calib): the ids kept as the source wrote them")
        return TapsDecision(served, {}, _record(mode, served, trained and trained.indices, "as-is", reason, {}, {},
                                                feeds, feeds, layers, calib_path, measured))
    if trained is None and config.aux_layer_ids:
        resolve_taps(config, layers)            # the config's ids name no layers the draft can be fed: why
    best, why = _best(measured, trained)
    if best is not None:
        chosen, decided_by, reason = best.indices, "measurement", why
    elif trained is not None:
        chosen, decided_by = trained.indices, "config"
        reason = f"the config's convention: {trained.origin}, {trained.convention.value} count{unmeasured}"
        if any(c.indices == trained.indices for c, _ in measured):
            reason += "; the measurement agrees (no candidate drafts better with a 95% interval above 1)"
    elif not measured and draft.format is DraftFormat.EAGLE and not config.aux_layer_ids:
        return TapsDecision(None, {}, _record(mode, None, None, "convention", EAGLE_CONVENTION, {}, {}, feeds, feeds,
                                              layers, calib_path, measured))
    elif not measured:
        raise _no_ids_error(draft, "no calibration set holds candidates to measure"
                            if calib_path is None else "the calibration set holds none of the candidate layer sets "
                            f"({', '.join(str(list(c.indices)) for c in tap_candidates(config, layers))})")
    else:
        raise _no_ids_error(draft, why)
    served = served_config(config, chosen, engines, layers)
    if served.problems:
        raise DraftFormatError(f"--serve-taps trained cannot make every engine feed hidden_states{list(chosen)}: "
                               f"{served.problems[0]}", path=draft.path / "config.json", field=AUX_KEY,
                               hint="--engine vllm, or --serve-taps as-is")
    after = {f.reader: f for f in served.feeds}
    return TapsDecision(chosen, served.written, _record(mode, chosen, chosen, decided_by, reason, served.written,
                                                        served.before, feeds, after, layers, calib_path, measured))


def _record(mode, served, trained, decided_by, reason, written, before, feeds_before, feeds_after, layers,
            calib_path, measured) -> ServeTapsRecord:
    from eagle3_quant.runtime.acceptance import acceptance_stats

    rows = []
    for candidate, counts in measured:
        stats = acceptance_stats(counts, TAPS_K)
        rows.append(MeasuredTaps(candidate.name, list(candidate.indices),
                                 stats.acceptance_length if stats.drafts else None,
                                 list(stats.per_position) if stats.drafts else [], stats.drafts))

    def indices(feeds):
        return {name: None if f.indices is None else list(f.indices) for name, f in feeds.items()}

    return ServeTapsRecord(mode, None if served is None else list(served), None if trained is None else list(trained),
                           decided_by, reason, dict(written), dict(before), indices(feeds_before),
                           indices(feeds_after), {n: f.problem for n, f in feeds_before.items() if f.problem}, layers,
                           public_name(calib_path) if calib_path else None,
                           TAPS_K if measured else None, rows)

