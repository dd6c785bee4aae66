"""A calibration set read as a draft is fed: one tap set out of the union `calibrate` stores; and the depth of the
target it came from, which the engines' default taps depend on."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import DraftFormatError, Eagle3QuantError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.target_depth import target_layers as config_layers
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.taps.candidates import trained_taps
from eagle3_quant.taps.capture import stale_order
from eagle3_quant.taps.engine_rules import Engine, engine_taps


def target_layers(calib: CalibrationSet) -> int | None:
    """The target's layer count `calibrate` recorded in the set, else None."""
    layers = (calib.info.extra or {}).get("target_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) else None


def target_depth(calib: CalibrationSet | None, target: str | Path | None = None) -> int | None:
    """The target's layer count: recorded by `calibrate`, else read from `target`'s config.json or the set's
    target's. A `target` the user named that cannot be read is an error; the set's recorded target unreadable only
    leaves the depth unknown."""
    layers = target_layers(calib) if calib is not None else None
    source = target or (calib.info.target if calib is not None else None)
    if layers is None and source:
        try:
            layers = config_layers(source)
        except Eagle3QuantError:
            if target is not None:
                raise
            return None
        except Exception:   # noqa: BLE001 - the set's recorded target unreadable only leaves the defaults unknown
            return None
    return layers


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
