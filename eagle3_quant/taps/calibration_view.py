"""A calibration set read as a draft is fed: one tap set out of the union `calibrate` stores."""

from __future__ import annotations

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.taps.candidates import trained_taps
from eagle3_quant.taps.capture import stale_order
from eagle3_quant.taps.engine_rules import Engine, engine_taps


def target_layers(calib: CalibrationSet) -> int | None:
    layers = (calib.info.extra or {}).get("target_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) else None


def draft_view(calib: CalibrationSet, config: DraftConfig, taps: tuple[int, ...] | None = None,
               what: str = "the draft reads", trust_unrecorded: bool = False) -> CalibrationSet:
    """`calib` as the draft reads it: the layers `taps` when given; else the trained ones (the config's
    convention), else the ones vLLM feeds it, whichever the set holds; a set of the draft's width as stored.
    `trust_unrecorded`: a set that records nothing about its taps (written by hand, or before `calibrate` recorded
    them) and holds the draft's width is read as stored, whatever its ids say (what `quantize` always did)."""
    held = calib.stored_layers
    unrecorded = not {"engine", "tap_candidates"} & set(calib.info.extra or {})
    if trust_unrecorded and unrecorded and len(held) == config.num_aux and (taps is None or set(taps) - set(held)):
        return calib
    if taps is not None:
        return _select(calib, tuple(taps), what)
    layers = target_layers(calib)
    wanted = []
    trained = trained_taps(config, layers)
    if trained is not None:
        wanted.append(trained.indices)
    try:
        wanted.append(engine_taps(config, layers, Engine.vllm).indices)
    except DraftFormatError:
        pass
    for indices in wanted:
        if set(indices) <= set(held) and list(held) == sorted(set(held)):
            return calib.select(indices)
    if len(held) == config.num_aux and not wanted:
        return calib
    return _select(calib, wanted[0] if wanted else held, what)


def _select(calib: CalibrationSet, indices: tuple[int, ...], what: str) -> CalibrationSet:
    held = list(calib.stored_layers)
    if held == sorted(set(held)) and set(indices) <= set(held):
        return calib.select(indices)
    raise DraftFormatError(f"calibration holds hidden_states{list(calib.stored_layers)}, {what} hidden_states"
                           f"{list(indices)}", path=calib.path, field="aux_layer_ids",
                           hint=stale_order(calib.stored_layers, indices)
                           or "capture it again with `eagle3-quant calibrate` (it stores every candidate tap set)")
