"""Everything the runtime module's shape depends on, resolved once from a DraftConfig."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.runtime.mla import DeepseekRope
from eagle3_quant.runtime.rope import RopeSpec

SUPPORTED_ACTIVATIONS = ("silu",)


@dataclass(frozen=True)
class RuntimeSpec:
    config: DraftConfig
    format: DraftFormat
    norm_before_residual: bool   # residual is hidden_norm(h) instead of h
    norm_before_fc: bool         # one RMSNorm over the concatenated aux states (input_norm.weight [3*Ht])
    fc_norm: bool                # one RMSNorm per aux state before fc (fc_norm.{0,1,2}.weight [Ht])
    norm_output: bool            # feed the post-norm hidden to the next step instead of the pre-norm one
    attention_bias: bool
    mlp_bias: bool
    rope: RopeSpec | DeepseekRope     # DeepseekRope: MLA drafts (rope over qk_rope_head_dim, interleaved)

    @property
    def layer_prefix(self) -> str:
        return self.format.layer_prefix

    @property
    def num_aux(self) -> int:
        return self.config.num_aux


def _layer_config(cfg: DraftConfig) -> Mapping[str, Any]:
    layer = cfg.raw.get("transformer_layer_config")
    return layer if isinstance(layer, dict) else cfg.raw


def _flag(raw: Mapping[str, Any], key: str, default: bool = False) -> bool:
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    value = eagle.get(key, raw.get(key, default))
    return bool(value) if value is not None else default


def resolve_spec(cfg: DraftConfig, fmt: DraftFormat) -> RuntimeSpec:
    raw, layer = cfg.raw, _layer_config(cfg)
    act = layer.get("hidden_act", "silu")
    if act not in SUPPORTED_ACTIVATIONS:
        raise DraftFormatError(f"activation {act!r} is not supported (Llama-style drafts use silu)",
                               field="hidden_act")
    scaling = cfg.rope_scaling
    if scaling is None and isinstance(layer.get("rope_parameters"), dict):
        scaling = layer["rope_parameters"]
    return RuntimeSpec(
        config=cfg,
        format=fmt,
        norm_before_residual=cfg.norm_before_residual,
        norm_before_fc=_flag(raw, "norm_before_fc"),
        fc_norm=_flag(raw, "fc_norm"),
        norm_output=_flag(raw, "norm_output"),
        attention_bias=bool(layer.get("attention_bias", False)),
        mlp_bias=bool(layer.get("mlp_bias", False)),
        rope=DeepseekRope.from_config(cfg.mla.qk_rope_head_dim, cfg.rope_theta, scaling)
        if cfg.family is DraftFamily.MLA else
        RopeSpec.from_config(cfg.head_dim, cfg.rope_theta, scaling, cfg.max_position_embeddings),
    )
