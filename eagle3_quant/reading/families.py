"""Which vLLM Eagle3 class (family) a draft loads into, and the MLA attention dims of MLA drafts.

vLLM 0.33 registers three Eagle3 classes (registry.py): Llama (the default), Qwen3 (q/k norm per head,
fused qkv named ``model.layers.T.qkv_proj``) and DeepseekV2 (MLA attention, dense MLP). See
docs/families.md for what each family's checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from eagle3_quant.errors import UnsupportedSourceError


class DraftFamily(StrEnum):
    LLAMA = "llama"    # Eagle3LlamaForCausalLM (llama_eagle3.py)
    QWEN3 = "qwen3"    # Eagle3Qwen3ForCausalLM (qwen3_eagle3.py)
    MLA = "mla"        # Eagle3DeepseekV2ForCausalLM (deepseek_eagle3.py)


LLAMA_ARCHITECTURES = frozenset({
    "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3MiniMaxM2ForCausalLM", "Eagle3Qwen2_5vlForCausalLM",
    "Eagle3Qwen3vlForCausalLM", "PEagleDraftModel", "PeagleLlamaForCausalLM"})
QWEN3_ARCHITECTURES = frozenset({"Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM"})
MLA_ARCHITECTURES = frozenset({"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"})
MLA_MODEL_TYPES = frozenset({"kimi_k2", "deepseek_v3", "deepseek_v2"})
SPECULATORS_LAYER_TYPES = {"llama": DraftFamily.LLAMA, "qwen3": DraftFamily.QWEN3}


@dataclass(frozen=True)
class MlaDims:
    """MLA attention dims (DeepseekV2MLAAttention); q_lora_rank None means a plain q_proj."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def detect_family(raw: Mapping[str, Any], path: Path) -> DraftFamily:
    """The vLLM class the draft loads into; an Eagle3 class vLLM does not register is refused."""
    layer = raw.get("transformer_layer_config")
    if isinstance(layer, dict):
        model_type = layer.get("model_type", "llama")
        if model_type not in SPECULATORS_LAYER_TYPES:
            raise UnsupportedSourceError(
                f"speculators layer type {model_type!r} is not supported (vLLM 0.33 serves "
                f"{', '.join(SPECULATORS_LAYER_TYPES)})", path=path, field="transformer_layer_config.model_type")
        return SPECULATORS_LAYER_TYPES[model_type]
    architectures = [a for a in raw.get("architectures") or [] if isinstance(a, str)]
    for arch in architectures:
        if arch in QWEN3_ARCHITECTURES:
            return DraftFamily.QWEN3
        if arch in MLA_ARCHITECTURES:
            return DraftFamily.MLA
        if arch in LLAMA_ARCHITECTURES:
            return DraftFamily.LLAMA
        if "Eagle3" in arch:
            raise UnsupportedSourceError(
                f"architecture {arch!r} is not an Eagle3 class vLLM 0.33 registers (supported: "
                f"{', '.join(sorted(LLAMA_ARCHITECTURES | QWEN3_ARCHITECTURES | MLA_ARCHITECTURES))})",
                path=path, field="architectures")
    if raw.get("model_type") in MLA_MODEL_TYPES and "kv_lora_rank" in raw:
        return DraftFamily.MLA
    return DraftFamily.LLAMA
