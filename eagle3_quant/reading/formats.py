"""The three on-disk Eagle3 draft formats and how to tell them apart by their tensors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from eagle3_quant.errors import NotAnEagle3DraftError


class DraftFormat(StrEnum):
    SPECFORGE = "specforge"      # LlamaForCausalLMEagle3, midlayer.*
    EAGLE = "eagle"              # original EAGLE: LlamaForCausalLM, fp16, midlayer.*
    SPECULATORS = "speculators"  # Eagle3Speculator, layers.0.*, transformer_layer_config

    @property
    def layer_prefix(self) -> str:
        return "layers.0." if self is DraftFormat.SPECULATORS else "midlayer."


SPECULATORS_ARCHITECTURES = frozenset({"Eagle3Speculator", "Eagle3DraftModel"})


def detect_format(tensor_names: Iterable[str], config: Mapping, where: str) -> DraftFormat:
    """Recognise a draft by its tensors first, then use the config to split the midlayer family."""
    names = set(tensor_names)
    has_fc = "fc.weight" in names
    midlayer = any(n.startswith("midlayer.") for n in names)
    layer0 = any(n.startswith("layers.0.") for n in names)
    deeper = sorted({n.split(".")[1] for n in names if n.startswith(("layers.", "model.layers."))
                     and n.split(".")[1].isdigit() and n.split(".")[1] != "0"})
    experts = any(".experts." in n for n in names)
    if not has_fc or not (midlayer or layer0):
        what = "a Mixture-of-Experts model" if experts else (
            "a plain decoder model (a target, not a draft)" if any(n.startswith("model.layers.") for n in names)
            else "not an Eagle3 draft")
        raise NotAnEagle3DraftError(
            f"{what}: an Eagle3 draft has 'fc.weight' and one decoder layer under 'midlayer.' or 'layers.0.'",
            path=where)
    if deeper and layer0:
        raise NotAnEagle3DraftError(
            f"has {len(deeper) + 1} decoder layers; an Eagle3 draft has exactly one", path=where)
    if layer0 and not midlayer:
        return DraftFormat.SPECULATORS
    architectures = config.get("architectures") or []
    if any(a in SPECULATORS_ARCHITECTURES for a in architectures):
        return DraftFormat.SPECULATORS
    if "LlamaForCausalLM" in architectures and "eagle_config" not in config:
        return DraftFormat.EAGLE
    return DraftFormat.SPECFORGE
