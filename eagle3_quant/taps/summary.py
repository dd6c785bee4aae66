"""Trained layers vs served ones, as the verbs report them: `inspect`'s summary, the note when an engine feeds other
layers than the draft was trained on, and `validate`'s ``metrics.taps`` (the measuring stays in validate)."""

from __future__ import annotations

from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.records.validation_metrics import TapsMeasured
from eagle3_quant.taps.candidates import tap_candidates, trained_taps
from eagle3_quant.taps.engine_rules import Engine, engine_feeds, engine_taps


def mismatch_line(engine: str, engine_indices, training_indices) -> str | None:
    """One line when the engine feeds other layers than the draft was trained on; None when they agree."""
    if training_indices is None or list(engine_indices) == list(training_indices):
        return None
    return (f"{engine} feeds this draft hidden_states{list(engine_indices)} as its config stands, but the config "
            f"says it was trained on hidden_states{list(training_indices)}: `validate` measures the acceptance "
            "under each, `quantize` (--serve-taps trained) writes the ids so that every engine feeds the trained ones")


def taps_summary(config: DraftConfig, num_layers: int | None) -> dict[str, Any]:
    """What `inspect` shows: per reader the layers fed and where from, the trained layers and the candidates."""
    trained = trained_taps(config, num_layers)
    return {"target_layers": num_layers,
            "trained": None if trained is None else list(trained.indices),
            "trained_source": (f"{trained.origin}, {trained.convention.value} count" if trained is not None else
                               "unknown: the config names no aux layer ids (measure the candidates: calibrate, "
                               "validate)"),
            "feeds": [f.to_dict() for f in engine_feeds(config, num_layers)],
            "candidates": [c.to_dict() for c in tap_candidates(config, num_layers)],
            "notes": [] if trained is None or trained.order_note is None else [trained.order_note]}


def served_taps(config: DraftConfig, num_layers: int | None = None) -> dict:
    """Training taps, each engine's taps, and one note per engine that feeds other layers (data-free)."""
    trained = trained_taps(config, num_layers)
    summary: dict = {"training": None if trained is None else list(trained.indices), "notes": [],
                     "feeds": [f.to_dict() for f in engine_feeds(config, num_layers)]}
    for engine in Engine:
        try:
            indices = engine_taps(config, num_layers, engine).indices
        except DraftFormatError:
            summary[engine.value] = None
            continue
        summary[engine.value] = list(indices)
        note = mismatch_line(engine.value, indices, summary["training"])
        if note:
            summary["notes"].append(note)
    order = None if trained is None else trained.order_note
    if order:
        summary["notes"].append(order)
    return summary


def taps_metrics(config: DraftConfig, layers: int | None, rows: list[TapsMeasured]) -> dict:
    """`metrics.taps`: feeds, trained layers, notes, the candidates measured and the best one (FP8 artifact)."""
    summary = served_taps(config, layers)
    summary["target_layers"] = layers
    summary["measured"] = [row.to_dict() for row in rows]
    judged = [row for row in rows if row.acceptance_length_fp8 is not None]
    summary["best"] = max(judged, key=lambda row: row.acceptance_length_fp8).name if judged else None
    return summary
