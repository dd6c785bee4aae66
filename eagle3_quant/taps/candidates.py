"""Which layers the draft was trained on, and the candidate layer sets worth measuring.

Trained layers: the config's own convention (nested ids were written by SpecForge and count layer outputs,
top-level ids by speculators and count inputs); unknown when the config names no ids. `tap_candidates` lists the
distinct index sets worth measuring: the trained one, each engine's, and for a draft without ids the training
defaults of both counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.taps.conventions import TapConvention, Taps, resolve_taps
from eagle3_quant.taps.engine_rules import default_ids, engine_feeds


def trained_taps(config: DraftConfig, num_layers: int | None) -> Taps | None:
    """The layers the config's convention says the draft was trained on; None without ids (or out of range)."""
    if not config.aux_layer_ids:
        return None
    try:
        return resolve_taps(config, num_layers)
    except DraftFormatError:
        return None


TRAINING_DEFAULTS = (
    ("defaults", 0, "the engines' and EAGLE's defaults [2, L//2, L-3], inputs of those layers"),
    ("specforge-defaults-as-inputs", -1, "SpecForge's defaults [1, L//2-1, L-4] counted as inputs"),
    ("defaults-as-outputs", 1, "the defaults [2, L//2, L-3] counted as outputs"),
)


@dataclass(frozen=True)
class TapCandidate:
    """One set of layers worth measuring, and every reason it is a candidate."""

    labels: tuple[str, ...]       # trained, vllm, vllm_v2, sglang, defaults, ...
    indices: tuple[int, ...]

    @property
    def name(self) -> str:
        return "=".join(self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "labels": list(self.labels), "indices": list(self.indices)}

    @classmethod
    def from_dict(cls, data: dict) -> TapCandidate:
        return cls(tuple(str(x) for x in data["labels"]), tuple(int(i) for i in data["indices"]))


def tap_candidates(config: DraftConfig, num_layers: int | None) -> tuple[TapCandidate, ...]:
    """The distinct index sets to measure: the trained layers, each engine's, and for a draft without ids the
    training defaults read in both counts (facts section 3); sets the draft cannot run on are left out."""
    found: dict[tuple[int, ...], list[str]] = {}
    trained = trained_taps(config, num_layers)
    if trained is not None:
        found[trained.indices] = ["trained"]
    for feed in engine_feeds(config, num_layers):
        if feed.indices is not None and feed.problem is None:
            found.setdefault(feed.indices, []).append(feed.reader)
    if trained is None and num_layers is not None and not config.aux_layer_ids:
        for label, shift, _ in TRAINING_DEFAULTS:
            ids = tuple(i + shift for i in default_ids(num_layers))
            try:
                indices = resolve_taps(config, num_layers, TapConvention.input, ids, label).indices
            except DraftFormatError:
                continue
            found.setdefault(indices, []).append(label)
    return tuple(TapCandidate(tuple(labels), indices) for indices, labels in found.items())


def candidate_union(candidates: tuple[TapCandidate, ...]) -> tuple[int, ...]:
    return tuple(sorted({i for c in candidates for i in c.indices}))
