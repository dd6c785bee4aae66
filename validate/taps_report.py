"""What `validate` measures about the target layers: the acceptance under each candidate the calibration set holds,
BF16 reference and FP8 artifact: numbers, not a warning. A draft naming no ids is measured under the defaults of both
counts; ``taps/summary.taps_metrics`` names the best and adds the feeds, the trained layers and the notes."""

from __future__ import annotations

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.records.validation_metrics import TapsMeasured
from eagle3_quant.taps.calibration_view import draft_view
from eagle3_quant.taps.capture import held_candidates
from eagle3_quant.taps.engine_rules import Engine, engine_feeds, engine_taps
from eagle3_quant.util.progress import SILENT, Progress


def served_view(calib: CalibrationSet, config: DraftConfig, layers: int | None) -> CalibrationSet:
    """The set as vLLM feeds the artifact (its model runner V1, the CPU engine's; after `--serve-taps trained`
    every engine feeds the same layers)."""
    try:
        taps = engine_taps(config, layers, Engine.vllm).indices
    except DraftFormatError:
        taps = None
    return draft_view(calib, config, taps, "vLLM feeds the artifact")


def candidate_rows(config: DraftConfig, calib: CalibrationSet, layers: int | None, fp8, bf16, k: int,
                   max_samples: int | None, served: tuple[int, ...], served_stats,
                   progress: Progress = SILENT) -> list[TapsMeasured]:
    """Acceptance under each candidate the set holds (`served_stats`: the fidelity run's (BF16, FP8) statistics,
    for the layers it was run on); both drafts' runs under the others counted on `progress` in samples."""
    from eagle3_quant.runtime.acceptance import acceptance_stats, draft_chains

    feeds = engine_feeds(config, layers)
    candidates = held_candidates(config, calib.stored_layers, calib.info.extra, layers)
    others = [c for c in candidates if not (c.indices == served and served_stats is not None)]
    samples = calib.num_samples if max_samples is None else min(max_samples, calib.num_samples)
    measured = {}
    if others:
        with progress.task(f"taps: both drafts under the set's {len(others)} other layer "
                           f"choice{'s' if len(others) > 1 else ''}", 2 * len(others) * samples,
                           unit="samples") as advance:
            for candidate in others:
                view = calib.select(candidate.indices)
                measured[candidate.name] = tuple(
                    acceptance_stats(draft_chains(d, view, k, max_samples, lambda: advance(1, 0)).accepted, k)
                    for d in (bf16, fp8))
    rows = []
    for candidate in candidates:
        ref_stats, cand_stats = measured.get(candidate.name, served_stats)
        rows.append(TapsMeasured(
            candidate.name, tuple(candidate.indices),
            tuple(f.reader for f in feeds if f.indices == candidate.indices and not f.problem),
            ref_stats.acceptance_length if ref_stats.drafts else None,
            cand_stats.acceptance_length if cand_stats.drafts else None, ref_stats.drafts,
            tuple(cand_stats.per_position) if cand_stats.drafts else ()))
    return rows

