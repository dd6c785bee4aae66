"""What a calibration set captures and records about the target layers each engine feeds the draft, and which
candidates a set can rebuild.

`calibrate` captures the union of the candidates (``taps/candidates.py``) in one pass (the trained layers, each
engine's, and for a draft without ids the training defaults of both counts), so that `validate` and `quantize`
can measure the acceptance under each one and rebuild any candidate's states from the set; ``--aux-layer-ids`` or
``--tap-convention`` capture what they name instead.

Both engines concatenate the states in ascending layer order (see ``taps/conventions.py``), so every index list here
is ascending; ids written in another order get a note (`Taps.order_note`), a repeated tap is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.taps.candidates import TapCandidate, candidate_union, tap_candidates, trained_taps
from eagle3_quant.taps.conventions import TapConvention, Taps, resolve_taps
from eagle3_quant.taps.engine_rules import Engine, engine_taps
from eagle3_quant.taps.summary import mismatch_line


def stale_order(held, wanted) -> str | None:
    """The hint when a set holds the right layers in another order (captured before the engines' order was kept)."""
    if list(held) == list(wanted) or sorted(held) != sorted(wanted):
        return None
    return ("the same layers in another order: the set was captured in the config's id order, the engines feed "
            "them ascending; capture or import it again")


@dataclass(frozen=True)
class TapRecord:
    """What a calibration set records about its taps (``info.extra``)."""

    engine: str
    engine_indices: tuple[int, ...]
    training_indices: tuple[int, ...] | None
    override: bool = False          # the user named the ids or the convention: the set holds those
    training_convention: str | None = None   # how the config's ids count (output: SpecForge, input: speculators)
    order_note: str | None = None   # the ids were written out of layer order (the set holds them ascending)
    candidates: tuple[TapCandidate, ...] = ()   # the layer sets the set holds, each measurable on its own
    target_layers: int | None = None

    def extra(self) -> dict:
        return {"engine": self.engine, "engine_aux_layer_ids": list(self.engine_indices),
                "training_aux_layer_ids": None if self.training_indices is None else list(self.training_indices),
                "training_convention": self.training_convention, "taps_override": self.override,
                "tap_candidates": [c.to_dict() for c in self.candidates], "target_layers": self.target_layers,
                **({"taps_order_note": self.order_note} if self.order_note else {})}

    @property
    def note(self) -> str | None:
        return mismatch_line(self.engine, self.engine_indices, self.training_indices)

    @property
    def notes(self) -> list[str]:
        return [line for line in (self.note, self.order_note) if line]

    @classmethod
    def from_extra(cls, extra: dict) -> TapRecord | None:
        if not extra.get("engine") or extra.get("engine_aux_layer_ids") is None:
            return None
        training = extra.get("training_aux_layer_ids")
        candidates = tuple(TapCandidate.from_dict(c) for c in extra.get("tap_candidates") or ())
        layers = extra.get("target_layers")
        return cls(extra["engine"], tuple(extra["engine_aux_layer_ids"]),
                   None if training is None else tuple(training), bool(extra.get("taps_override")),
                   extra.get("training_convention"), extra.get("taps_order_note"), candidates,
                   layers if isinstance(layers, int) else None)


@dataclass(frozen=True)
class CapturePlan:
    """What a capture or an import stores: `indices` (ascending), the engine's taps, and the record."""

    indices: tuple[int, ...]
    taps: Taps                      # the engine's taps (or those the user named): the convention and ids shown
    record: TapRecord


def capture_taps(config: DraftConfig, num_layers: int | None, engine: Engine | str,
                 convention: TapConvention | str = TapConvention.auto,
                 ids: list[int] | tuple[int, ...] | None = None) -> CapturePlan:
    """What to capture: the union of the candidates (their states rebuild each candidate's), unless the user
    named the ids or the convention; and the record."""
    override = ids is not None or TapConvention(convention) is not TapConvention.auto
    engine = Engine(engine)
    taps = resolve_taps(config, num_layers, convention, ids) if override else engine_taps(config, num_layers, engine)
    trained = trained_taps(config, num_layers)
    candidates = ((TapCandidate(("given",), taps.indices),) if override else
                  tap_candidates(config, num_layers) if num_layers is not None else
                  _depthless_candidates(config, taps, engine))
    indices = candidate_union(candidates) or taps.indices
    record = TapRecord(engine.value, taps.indices, None if trained is None else trained.indices, override,
                       None if trained is None else trained.convention.value, taps.order_note, candidates,
                       num_layers)
    return CapturePlan(indices, taps, record)


def _depthless_candidates(config: DraftConfig, taps: Taps, engine: Engine) -> tuple[TapCandidate, ...]:
    """Without the target's depth (an import without --target): the engine's taps and the trained ones."""
    trained = trained_taps(config, None)
    found = {taps.indices: [engine.value]}
    if trained is not None:
        found.setdefault(trained.indices, []).insert(0, "trained")
    return tuple(TapCandidate(tuple(labels), indices) for indices, labels in found.items())


def held_candidates(config: DraftConfig, stored: tuple[int, ...], extra: dict,
                    num_layers: int | None) -> tuple[TapCandidate, ...]:
    """The candidates a set can rebuild: this draft's own (with the target's depth when known), then those the set
    records for the draft it was captured for (its source: named ``source:...`` when this draft's config names
    them otherwise, e.g. after `--serve-taps trained` rewrote the ids), whose layers it stores; the layers it
    stores when none of them is there."""
    record = TapRecord.from_extra(extra or {})
    layers = num_layers if num_layers is not None else (record.target_layers if record else None)
    found: dict[tuple[int, ...], tuple[str, ...]] = {}
    for candidate in tap_candidates(config, layers):
        if set(candidate.indices) <= set(stored):
            found[candidate.indices] = candidate.labels
    for candidate in record.candidates if record else ():
        if set(candidate.indices) <= set(stored) and candidate.indices not in found:
            found[candidate.indices] = (f"source:{candidate.name}",)
    if not found and len(stored) == config.num_aux:
        found[tuple(stored)] = ("stored",)
    return tuple(TapCandidate(labels, indices) for indices, labels in found.items())


def accepted_calibration_taps(config: DraftConfig, extra: dict) -> set[tuple[int, ...]]:
    """Index lists a calibration set for this draft may hold: the recorded engine's, else any engine's or the
    training taps (sets made before engines were recorded hold the training taps)."""
    record = TapRecord.from_extra(extra or {})
    if record is not None and record.override:
        return set()                 # whatever the user asked for; nothing to compare
    engines = [Engine(record.engine)] if record and record.engine in Engine.__members__ else list(Engine)
    accepted = set()
    trained = trained_taps(config, None)
    if trained is not None and record is None:
        accepted.add(trained.indices)
    for engine in engines:
        try:
            accepted.add(engine_taps(config, None, engine).indices)
        except DraftFormatError:
            pass
    return accepted
