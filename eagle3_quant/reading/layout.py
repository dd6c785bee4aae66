"""What tensors an Eagle3 draft must hold, with which shapes, and which of them are linears."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eagle3_quant.errors import DraftFormatError, UnsupportedSourceError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.reading.safetensors_header import FLOAT_DTYPES, FP8_DTYPES, TensorInfo
from eagle3_quant.reading.scale_names import QUANT_SUFFIXES


class Part(StrEnum):
    FC = "fc"
    ATTENTION = "attention"
    MLP = "mlp"
    NORM = "norm"
    LM_HEAD = "lm_head"
    EMBEDDING = "embedding"
    VOCAB_MAP = "vocab_map"
    EXTRA = "extra"


LINEAR_ROLES = ("fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
MLA_ROLES = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
# vLLM fuses these checkpoint linears into one runtime layer; all members must share a scheme.
FUSED_GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
MLA_FUSED_GROUPS = {"fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"), "gate_up_proj": ("gate_proj", "up_proj")}
EMBEDDING_NAMES = ("embed_tokens.weight", "model.embed_tokens.weight")


@dataclass(frozen=True)
class LinearSpec:
    role: str
    module: str            # checkpoint module name, e.g. "midlayer.self_attn.q_proj"
    out_features: int
    in_features: int
    part: Part

    @property
    def weight_name(self) -> str:
        return f"{self.module}.weight"

    @property
    def numel(self) -> int:
        return self.out_features * self.in_features


@dataclass(frozen=True)
class DraftLayout:
    format: DraftFormat
    linears: tuple[LinearSpec, ...]
    parts: dict[str, Part]          # every tensor name -> part
    optional_present: tuple[str, ...]
    extra: tuple[str, ...]          # tensors we do not recognise; always carried over untouched
    shared_lm_head: bool = False    # no lm_head.weight: vLLM shares the target's lm_head (has_own_lm_head False)

    def linear(self, role: str) -> LinearSpec:
        return next(lin for lin in self.linears if lin.role == role)


def fused_groups(cfg: DraftConfig) -> dict[str, tuple[str, ...]]:
    """The fused runtime layers of this draft's vLLM class -> the checkpoint linears behind each."""
    if cfg.family is not DraftFamily.MLA:
        return FUSED_GROUPS
    if cfg.mla.q_lora_rank is None:     # vLLM keeps q_proj and kv_a_proj_with_mqa apart
        return {"gate_up_proj": FUSED_GROUPS["gate_up_proj"]}
    return MLA_FUSED_GROUPS


def expected_linears(fmt: DraftFormat, cfg: DraftConfig) -> tuple[LinearSpec, ...]:
    if cfg.family is DraftFamily.MLA:
        return _mla_linears(fmt, cfg)
    p, h, q_out, kv_out = fmt.layer_prefix, cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, \
        cfg.num_key_value_heads * cfg.head_dim
    i = cfg.intermediate_size
    return (
        LinearSpec("fc", "fc", h, cfg.num_aux * cfg.target_hidden_size, Part.FC),
        LinearSpec("q_proj", p + "self_attn.q_proj", q_out, 2 * h, Part.ATTENTION),
        LinearSpec("k_proj", p + "self_attn.k_proj", kv_out, 2 * h, Part.ATTENTION),
        LinearSpec("v_proj", p + "self_attn.v_proj", kv_out, 2 * h, Part.ATTENTION),
        LinearSpec("o_proj", p + "self_attn.o_proj", h, q_out, Part.ATTENTION),
        LinearSpec("gate_proj", p + "mlp.gate_proj", i, h, Part.MLP),
        LinearSpec("up_proj", p + "mlp.up_proj", i, h, Part.MLP),
        LinearSpec("down_proj", p + "mlp.down_proj", h, i, Part.MLP),
        LinearSpec("lm_head", "lm_head", cfg.draft_vocab_size, h, Part.LM_HEAD),
    )


def _mla_linears(fmt: DraftFormat, cfg: DraftConfig) -> tuple[LinearSpec, ...]:
    p, h, i, m, heads = fmt.layer_prefix, cfg.hidden_size, cfg.intermediate_size, cfg.mla, cfg.num_attention_heads
    a = p + "self_attn."
    if m.q_lora_rank is None:
        query = (LinearSpec("q_proj", a + "q_proj", heads * m.qk_head_dim, 2 * h, Part.ATTENTION),)
    else:
        query = (LinearSpec("q_a_proj", a + "q_a_proj", m.q_lora_rank, 2 * h, Part.ATTENTION),
                 LinearSpec("q_b_proj", a + "q_b_proj", heads * m.qk_head_dim, m.q_lora_rank, Part.ATTENTION))
    return (
        LinearSpec("fc", "fc", h, cfg.num_aux * cfg.target_hidden_size, Part.FC),
        *query,
        LinearSpec("kv_a_proj_with_mqa", a + "kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, 2 * h,
                   Part.ATTENTION),
        LinearSpec("kv_b_proj", a + "kv_b_proj", heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank,
                   Part.ATTENTION),
        LinearSpec("o_proj", a + "o_proj", h, heads * m.v_head_dim, Part.ATTENTION),
        LinearSpec("gate_proj", p + "mlp.gate_proj", i, h, Part.MLP),
        LinearSpec("up_proj", p + "mlp.up_proj", i, h, Part.MLP),
        LinearSpec("down_proj", p + "mlp.down_proj", h, i, Part.MLP),
        LinearSpec("lm_head", "lm_head", cfg.draft_vocab_size, h, Part.LM_HEAD),
    )


def family_norms(fmt: DraftFormat, cfg: DraftConfig) -> dict[str, int]:
    """Per-family attention norms (name -> size) on top of the layer and final norms."""
    a = fmt.layer_prefix + "self_attn."
    if cfg.family is DraftFamily.QWEN3:
        return {a + "q_norm.weight": cfg.head_dim, a + "k_norm.weight": cfg.head_dim}
    if cfg.family is DraftFamily.MLA:
        q_norm = {} if cfg.mla.q_lora_rank is None else {a + "q_a_layernorm.weight": cfg.mla.q_lora_rank}
        return {**q_norm, a + "kv_a_layernorm.weight": cfg.mla.kv_lora_rank}
    return {}


def _refuse_indexer(extra: tuple[str, ...], where: str) -> None:
    """A DeepSeek V3.2 sparse-attention indexer (``self_attn.indexer.*``) that no Eagle3 class builds."""
    indexer = next((n for n in extra if ".indexer." in n), None)
    if indexer is not None:
        raise UnsupportedSourceError("a sparse-attention indexer (DeepSeek V3.2) is not supported: no Eagle3 class "
                                     "of vLLM 0.33 or SGLang 0.5.23 builds one", path=where, tensor=indexer)


def build_layout(fmt: DraftFormat, cfg: DraftConfig, tensors: dict[str, TensorInfo], where: str) -> DraftLayout:
    """Check every expected tensor against the config; classify the rest."""
    _refuse_quantized(tensors, cfg, where)
    p, h, ht = fmt.layer_prefix, cfg.hidden_size, cfg.target_hidden_size
    linears = expected_linears(fmt, cfg)
    shared_lm_head = "lm_head.weight" not in tensors
    if shared_lm_head:
        if cfg.draft_vocab_size != cfg.vocab_size:
            raise DraftFormatError(f"missing; a draft without its own lm_head shares the target's, which needs the "
                                   f"full vocab, but draft_vocab_size is {cfg.draft_vocab_size}", path=where,
                                   tensor="lm_head.weight")
        linears = tuple(lin for lin in linears if lin.role != "lm_head")
    parts: dict[str, Part] = {}
    for lin in linears:
        _expect(tensors, lin.weight_name, (lin.out_features, lin.in_features), FLOAT_DTYPES, where)
        parts[lin.weight_name] = lin.part
        bias = f"{lin.module}.bias"
        if bias in tensors:
            _expect(tensors, bias, (lin.out_features,), FLOAT_DTYPES, where)
            parts[bias] = lin.part
    for norm in (p + "input_layernorm.weight", p + "hidden_norm.weight", p + "post_attention_layernorm.weight",
                 "norm.weight"):
        _expect(tensors, norm, (h,), FLOAT_DTYPES, where)
        parts[norm] = Part.NORM
    for norm, size in family_norms(fmt, cfg).items():
        _expect(tensors, norm, (size,), FLOAT_DTYPES, where)
        parts[norm] = Part.NORM

    optional = {
        "d2t": ((cfg.draft_vocab_size,), {"I64"}, Part.VOCAB_MAP),
        "t2d": ((cfg.vocab_size,), {"BOOL"}, Part.VOCAB_MAP),
        "input_norm.weight": ((cfg.num_aux * ht,), FLOAT_DTYPES, Part.NORM),
        **{f"fc_norm.{k}.weight": ((ht,), FLOAT_DTYPES, Part.NORM) for k in range(cfg.num_aux)},
        **{name: ((cfg.vocab_size, h), FLOAT_DTYPES, Part.EMBEDDING) for name in EMBEDDING_NAMES},
    }
    present = []
    for name, (shape, dtypes, part) in optional.items():
        if name in tensors:
            _expect(tensors, name, shape, dtypes, where)
            parts[name] = part
            present.append(name)
    extra = tuple(sorted(set(tensors) - set(parts)))
    _refuse_indexer(extra, where)
    parts.update({name: Part.EXTRA for name in extra})
    return DraftLayout(fmt, linears, parts, tuple(present), extra, shared_lm_head)


def _refuse_quantized(tensors: dict[str, TensorInfo], cfg: DraftConfig, where: str) -> None:
    if "quantization_config" in cfg.raw:
        raise UnsupportedSourceError("the draft is already quantized (config has quantization_config)",
                                     path=where, field="quantization_config",
                                     hint="give the BF16/FP16 source draft")
    for name, info in sorted(tensors.items()):
        if info.dtype in FP8_DTYPES or name.rsplit(".", 1)[-1] in QUANT_SUFFIXES:
            what = f"{info.dtype} weights" if info.dtype in FP8_DTYPES else "a quantization scale"
            raise UnsupportedSourceError(f"the draft is already quantized ({what})", path=where,
                                         tensor=name, hint="give the BF16/FP16 source draft")


def _expect(tensors: dict[str, TensorInfo], name: str, shape: tuple[int, ...], dtypes: frozenset | set,
            where: str) -> None:
    info = tensors.get(name)
    if info is None:
        raise DraftFormatError(f"missing; expected shape {list(shape)}", path=where, tensor=name)
    if info.shape != shape:
        raise DraftFormatError(f"shape {list(info.shape)} disagrees with config.json, which implies {list(shape)}",
                               path=where, tensor=name)
    if info.dtype not in dtypes:
        raise DraftFormatError(f"dtype {info.dtype}, expected one of {sorted(dtypes)}", path=where, tensor=name)
