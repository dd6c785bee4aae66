"""`quantize --serve-taps trained|as-is`, the part that needs the stage: the target's depth, the calibration set, and
the BF16 draft's acceptance under each candidate the set holds; ``taps/serve_decision.py`` decides from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.taps.calibration_view import target_depth
from eagle3_quant.taps.candidates import TapCandidate
from eagle3_quant.taps.capture import held_candidates
from eagle3_quant.taps.serve_decision import TAPS_K, TapsDecision, decide


def _measure(draft: DraftCheckpoint, calib, candidates: tuple[TapCandidate, ...], device: str) -> list:
    """(candidate, chains) for each candidate the set holds, the BF16 draft fed its layers."""
    from eagle3_quant.quantize.calibration import calibration_embedding
    from eagle3_quant.runtime.acceptance import draft_chains
    from eagle3_quant.runtime.loading import load_draft
    from eagle3_quant.runtime.serving import serving_numerics

    dtype = serving_numerics(draft.config.torch_dtype).dtype       # as vLLM serves the draft, like validate
    runtime = load_draft(draft.path, device, dtype, embedding=calibration_embedding(draft, calib))
    return [(c, draft_chains(runtime, calib.select(c.indices), TAPS_K)) for c in candidates]


@dataclass(frozen=True)
class TapsMeasurement:
    """What the decision reads of the calibration set, whatever the scheme: the target's depth and the BF16 draft's
    acceptance under each candidate the set holds (measured once by `--scheme auto` for every rung it writes)."""

    layers: int | None
    drafted: list               # (candidate, its chains: runtime.acceptance.Chains)
    unmeasured: str = ""        # why the candidates were not measured ("" when they were, or there are none)
    seconds_per_draft: float = 0.0      # drafting one candidate's chains took, on average (alone: auto_time.Stopwatch)

    @property
    def measured(self) -> list:
        """(candidate, accepted counts per sample), what the decision reads."""
        return [(c, chains.accepted) for c, chains in self.drafted]

    def chains(self, indices: tuple[int, ...], k: int):
        """The BF16 draft's chains fed `indices` with k steps, when measured here (else None)."""
        return next((chains for c, chains in self.drafted if tuple(c.indices) == tuple(indices) and k == TAPS_K),
                    None)


def measure_serve_taps(draft: DraftCheckpoint, calib_path: Path | None, device: str) -> TapsMeasurement:
    from eagle3_quant.quantize.calibration import check_calibration_size
    from eagle3_quant.records.calibration import load_calibration

    calib = load_calibration(calib_path) if calib_path is not None else None
    if calib is not None:
        check_calibration_size(draft, calib)
    layers = target_depth(calib) if calib is not None else None
    candidates = held_candidates(draft.config, calib.stored_layers, calib.info.extra, layers) if calib else ()
    if not candidates:
        return TapsMeasurement(layers, [])
    from eagle3_quant.quantize.auto_time import Stopwatch
    from eagle3_quant.quantize.quark_import import importing_in_background

    watch = Stopwatch(importing_in_background)     # auto reads its rate for the time left
    try:
        drafted = _measure(draft, calib, candidates, device)
        return TapsMeasurement(layers, drafted, seconds_per_draft=watch.elapsed_alone() / len(drafted))
    except Exception as exc:   # noqa: BLE001 - the draft cannot run on this set here (its embedding, the
        # target's files out of reach): the measurement is optional, the config decides, and the reason says so
        why = exc.message if isinstance(exc, Eagle3QuantError) else f"{type(exc).__name__}: {exc}"
        return TapsMeasurement(layers, [], f"; the candidates were not measured: {' '.join(why.split())[:200]}")


def decide_serve_taps(draft: DraftCheckpoint, mode: str, calib_path: Path | None, engines: tuple[str, ...],
                      device: str, measurement: TapsMeasurement | None = None) -> TapsDecision:
    """The layers to serve the artifact with, what to write for them, and the manifest's record: the target's
    depth and the BF16 draft measured under each candidate the set holds (`measurement`, else measured now), then
    ``taps/serve_decision.decide``."""
    m = measurement if measurement is not None else measure_serve_taps(draft, calib_path, device)
    return decide(draft, mode, engines, m.layers, m.measured, m.unmeasured, calib_path)
