"""`quantize --serve-taps trained|as-is`, the part that needs the stage: the target's depth, the calibration set, and
the BF16 draft's acceptance under each candidate the set holds; ``taps/serve_decision.py`` decides from them.
"""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.taps.calibration_view import target_depth
from eagle3_quant.taps.candidates import TapCandidate
from eagle3_quant.taps.capture import held_candidates
from eagle3_quant.taps.serve_decision import TAPS_K, TapsDecision, decide


def _measure(draft: DraftCheckpoint, calib, candidates: tuple[TapCandidate, ...], device: str) -> list:
    """(candidate, accepted counts per sample) for each candidate the set holds, the BF16 draft fed its layers."""
    from eagle3_quant.quantize.calibration import calibration_embedding
    from eagle3_quant.runtime.acceptance import chain_acceptance
    from eagle3_quant.runtime.loading import load_draft
    from eagle3_quant.runtime.serving import serving_numerics

    dtype = serving_numerics(draft.config.torch_dtype).dtype       # as vLLM serves the draft, like validate
    runtime = load_draft(draft.path, device, dtype, embedding=calibration_embedding(draft, calib))
    return [(c, chain_acceptance(runtime, calib.select(c.indices), TAPS_K)) for c in candidates]


def decide_serve_taps(draft: DraftCheckpoint, mode: str, calib_path: Path | None, engines: tuple[str, ...],
                      device: str) -> TapsDecision:
    """The layers to serve the artifact with, what to write for them, and the manifest's record: the target's
    depth and the BF16 draft measured under each candidate the set holds, then ``taps/serve_decision.decide``."""
    from eagle3_quant.quantize.calibration import check_calibration_size
    from eagle3_quant.records.calibration import load_calibration

    config = draft.config
    calib = load_calibration(calib_path) if calib_path is not None else None
    if calib is not None:
        check_calibration_size(draft, calib)
    layers = target_depth(calib) if calib is not None else None
    candidates = held_candidates(config, calib.stored_layers, calib.info.extra, layers) if calib else ()
    measured, unmeasured = [], ""
    if candidates:
        try:
            measured = _measure(draft, calib, candidates, device)
        except Exception as exc:   # noqa: BLE001 - the draft cannot run on this set here (its embedding, the
            # target's files out of reach): the measurement is optional, the config decides, and the reason says so
            why = exc.message if isinstance(exc, Eagle3QuantError) else f"{type(exc).__name__}: {exc}"
            unmeasured = f"; the candidates were not measured: {' '.join(why.split())[:200]}"
    return decide(draft, mode, engines, layers, measured, unmeasured, calib_path)
