"""Which target hidden states the draft reads: resolve the layer taps (three, or the config's
``num_aux_hidden_states``; one more than the ids adds the target's final layer) and their counting convention.

Two conventions count the same tensors differently:

- ``input``: id k is the input of decoder layer k, i.e. transformers ``hidden_states[k]`` (0 = embeddings).
  EAGLE, vLLM and speculators count this way; defaults ``[2, L//2, L-3]``. vLLM reads the top-level
  ``eagle_aux_hidden_state_layer_ids`` of a speculators config with this meaning.
- ``output``: id k is the output of decoder layer k, i.e. ``hidden_states[k+1]``. SpecForge, SGLang and
  ModelOpt count this way (SGLang adds 1 when it captures); defaults ``[1, L//2-1, L-4]``. SpecForge writes
  the ids nested in ``eagle_config``.

``auto`` decides from where the config keeps the ids: nested in ``eagle_config`` -> output, top level ->
input; no ids -> the defaults (the same tensors either way).

Order: both engines concatenate the states in ascending layer order, whatever the order of the ids (vLLM 0.33
sorts them, ``EagleModelMixin._set_aux_hidden_state_layers``, and appends each as its layer loop reaches it;
SGLang 0.5.23 appends in its layer loop, ``layers_to_capture`` membership). So `Taps` holds the indices
ascending and the ids in the same order; `order_note` says when the config lists them otherwise. A repeated
tap is refused: the engines capture a layer once, and vLLM then feeds fewer states than the fc reads while
SGLang's packed buffer (``AuxHiddenStatePacker``) leaves a slot unwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig

AUX_KEY = "eagle_aux_hidden_state_layer_ids"


class TapConvention(StrEnum):
    auto = "auto"
    input = "input"
    output = "output"


@dataclass(frozen=True)
class Taps:
    indices: tuple[int, ...]         # transformers hidden_states indices (input of layer k)
    convention: TapConvention        # how `ids` count (input or output)
    ids: tuple[int, ...]             # as written in the draft config, given by the user, or the defaults
    origin: str                      # where `ids` came from, in words
    written: tuple[int, ...] | None = None   # the ids in the order written, when that is not ascending

    @property
    def order_note(self) -> str | None:
        """One line when the ids are written out of layer order (the engines feed them ascending)."""
        if self.written is None:
            return None
        return (f"aux layer ids {list(self.written)} ({self.origin}) are not in layer order: vLLM and SGLang feed "
                f"the states ascending, hidden_states{list(self.indices)}, and calibration stores them so")


def default_ids(num_layers: int, convention: TapConvention) -> tuple[int, ...]:
    ids = (2, num_layers // 2, num_layers - 3)
    return ids if convention is TapConvention.input else tuple(i - 1 for i in ids)


def _config_ids(raw: dict[str, Any]) -> tuple[tuple[int, ...] | None, TapConvention, str]:
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if nested.get(AUX_KEY) is not None:
        return tuple(nested[AUX_KEY]), TapConvention.output, f"draft config eagle_config.{AUX_KEY} (SpecForge)"
    if raw.get(AUX_KEY) is not None:
        return tuple(raw[AUX_KEY]), TapConvention.input, f"draft config {AUX_KEY} (speculators/vLLM)"
    return None, TapConvention.input, "defaults"


def resolve_taps(config: DraftConfig, num_layers: int | None, convention: TapConvention | str = TapConvention.auto,
                 ids: list[int] | tuple[int, ...] | None = None, origin: str = "--aux-layer-ids") -> Taps:
    """The hidden_states indices to capture for this draft on a target with `num_layers` decoder layers.

    `ids` overrides the config's ids (counted as `convention`, input when auto; `origin` says where they come
    from). With `num_layers` None (target unknown) the ids must be given and are not range-checked."""
    convention = TapConvention(convention)
    if ids is not None:
        found, implied = tuple(ids), TapConvention.input
    else:
        found, implied, origin = _config_ids(dict(config.raw))
    used = implied if convention is TapConvention.auto else convention
    if found is None:
        if config.num_aux != 3:
            raise DraftFormatError(f"the draft reads {config.num_aux} target states but names no aux layer ids",
                                   field=AUX_KEY, hint="pass --aux-layer-ids")
        if num_layers is None:
            raise DraftFormatError("the draft config names no aux layer ids, and the default taps depend on the "
                                   "target's layer count", field=AUX_KEY, hint="pass --target")
        found = default_ids(num_layers, used)
        origin = f"defaults for a {num_layers}-layer target"
    # the ids plus the target's final layer (MiniMax-M3's draft), when the config says so
    final = config.aux_includes_final_layer and len(found) == config.num_aux - 1
    if len(found) != config.num_aux and not final:
        raise DraftFormatError(f"the draft reads {config.num_aux} target layers (its fc width), {origin} gives "
                               f"{list(found)}", field=AUX_KEY)
    indices = tuple(i + 1 for i in found) if used is TapConvention.output else found
    for i, index in zip(found, indices, strict=True):
        if index < 0 or (num_layers is not None and index >= num_layers):
            raise DraftFormatError(
                f"layer id {i} ({used.value} convention, from {origin}) is hidden_states[{index}], outside the "
                f"inputs of the target's {num_layers} decoder layers (0..{(num_layers or 0) - 1})", field=AUX_KEY,
                hint="check --tap-convention, or that the draft belongs to this target")
    if final:
        if num_layers is None:
            raise DraftFormatError("the draft also reads the target's final layer; its index needs the target",
                                   field=AUX_KEY, hint="pass --target")
        indices = (*indices, num_layers)       # transformers' last hidden_states entry
    return engine_order(indices, used, found, origin)


def engine_order(indices: tuple[int, ...], convention: TapConvention, ids: tuple[int, ...], origin: str) -> Taps:
    """The taps in the order the engines concatenate them (ascending layer), a repeated layer refused."""
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise DraftFormatError(
            f"{origin} taps hidden_states{repeated} more than once ({list(ids)}): vLLM and SGLang capture a layer "
            "once, so no engine feeds this draft the states its fc reads", field=AUX_KEY)
    order = sorted(range(len(indices)), key=lambda j: indices[j])
    if order == list(range(len(indices))):
        return Taps(indices, convention, ids, origin)
    return Taps(tuple(indices[j] for j in order), convention, tuple(ids[j] for j in order if j < len(ids)), origin,
                ids)
