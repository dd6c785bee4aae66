"""The target hidden states each serving engine feeds a draft, read from the engines' own code.

vLLM 0.33 (``gpu_model_runner._get_eagle3_aux_layers_from_config``): the top-level
``eagle_aux_hidden_state_layer_ids`` if present, else the nested ``eagle_config`` ones, each id L read as the
input of layer L (``hidden_states[L]``); without ids ``(2, L//2, L-3)``, inputs too.
SGLang 0.5.23 (``spec_aux_hidden_state.py``, ``LlamaForCausalLM.set_eagle3_layers_to_capture``): only the
nested ``eagle_config`` ids, each captured as id+1 (the output of layer L); a top-level list is ignored and
the defaults ``[2, L//2, L-3]`` (no +1) are used.

The training convention is what ``auto`` in `taps.py` resolves: nested ids were written by SpecForge
(output count), top-level ids by speculators (input count). When the engine feeds other layers than the
draft was trained on, `mismatch_line` says so, naming both index lists.

Both engines concatenate the states in ascending layer order (see `taps.py`), so every index list here is
ascending; ids written in another order get a note (`Taps.order_note`), a repeated tap is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from eagle3_quant.calib.taps import AUX_KEY, TapConvention, Taps, resolve_taps

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig


class Engine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


DEFAULT_ENGINE = Engine.vllm


def _ids(raw: dict[str, Any]) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    top, inner = raw.get(AUX_KEY), nested.get(AUX_KEY)
    return (tuple(top) if top else None), (tuple(inner) if inner else None)


def engine_taps(config: DraftConfig, num_layers: int | None, engine: Engine | str) -> Taps:
    """The hidden_states indices `engine` captures for this draft on a `num_layers`-layer target."""
    engine = Engine(engine)
    top, nested = _ids(dict(config.raw))
    if engine is Engine.vllm:
        ids, where = (top, AUX_KEY) if top else (nested, f"eagle_config.{AUX_KEY}")
        convention = TapConvention.input
    else:
        ids, where, convention = nested, f"eagle_config.{AUX_KEY}", TapConvention.output
    if ids is None:
        if num_layers is None:
            raise DraftFormatError(f"{engine.value} uses its default taps for this draft, which depend on the "
                                   "target's layer count", field=AUX_KEY, hint="pass --target")
        ids = (2, num_layers // 2, num_layers - 3)
        where, convention = f"{engine.value} defaults for a {num_layers}-layer target", TapConvention.input
    return resolve_taps(config, num_layers, convention, ids, f"{where}, as {engine.value} reads it")


def training_taps(config: DraftConfig, num_layers: int | None) -> Taps | None:
    """The indices the draft was trained on when its config says so (None: unknown without the target)."""
    try:
        return resolve_taps(config, num_layers)
    except DraftFormatError:
        return None


def mismatch_line(engine: str, engine_indices, training_indices) -> str | None:
    """One line when the engine feeds other layers than the draft was trained on; None when they agree."""
    if training_indices is None or list(engine_indices) == list(training_indices):
        return None
    return (f"{engine} feeds this draft hidden_states{list(engine_indices)}, but its config says it was trained "
            f"on hidden_states{list(training_indices)}: acceptance under {engine} may be lower than trained")


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

    def extra(self) -> dict:
        return {"engine": self.engine, "engine_aux_layer_ids": list(self.engine_indices),
                "training_aux_layer_ids": None if self.training_indices is None else list(self.training_indices),
                "training_convention": self.training_convention, "taps_override": self.override,
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
        return cls(extra["engine"], tuple(extra["engine_aux_layer_ids"]),
                   None if training is None else tuple(training), bool(extra.get("taps_override")),
                   extra.get("training_convention"), extra.get("taps_order_note"))


def tap_record(config: DraftConfig, num_layers: int | None, engine: Engine | str) -> TapRecord:
    trained = training_taps(config, num_layers)
    return TapRecord(Engine(engine).value, engine_taps(config, num_layers, engine).indices,
                     None if trained is None else trained.indices, False,
                     None if trained is None else trained.convention.value)


def capture_taps(config: DraftConfig, num_layers: int | None, engine: Engine | str,
                 convention: TapConvention | str = TapConvention.auto,
                 ids: list[int] | tuple[int, ...] | None = None) -> tuple[Taps, TapRecord]:
    """What to capture: the engine's taps, unless the user named the ids or the convention; and the record."""
    override = ids is not None or TapConvention(convention) is not TapConvention.auto
    taps = resolve_taps(config, num_layers, convention, ids) if override else engine_taps(config, num_layers, engine)
    record = tap_record(config, num_layers, engine)
    return taps, TapRecord(record.engine, record.engine_indices, record.training_indices, override,
                           record.training_convention, taps.order_note)


def served_taps(config: DraftConfig, num_layers: int | None = None) -> dict:
    """Training taps, each engine's taps, and one note per engine that feeds other layers (data-free)."""
    trained = training_taps(config, num_layers)
    summary: dict = {"training": None if trained is None else list(trained.indices), "notes": []}
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


def accepted_calibration_taps(config: DraftConfig, extra: dict) -> set[tuple[int, ...]]:
    """Index lists a calibration set for this draft may hold: the recorded engine's, else any engine's or the
    training taps (sets made before engines were recorded hold the training taps)."""
    record = TapRecord.from_extra(extra or {})
    if record is not None and record.override:
        return set()                 # whatever the user asked for; nothing to compare
    engines = [Engine(record.engine)] if record and record.engine in Engine.__members__ else list(Engine)
    accepted = set()
    trained = training_taps(config, None)
    if trained is not None and record is None:
        accepted.add(trained.indices)
    for engine in engines:
        try:
            accepted.add(engine_taps(config, None, engine).indices)
        except DraftFormatError:
            pass
    return accepted
