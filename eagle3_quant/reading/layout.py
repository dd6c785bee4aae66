"""What tensors an Eagle3 draft must hold, with which shapes, and which of them are linears."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eagle3_quant.errors import DraftFormatError, UnsupportedSourceError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.reading.safetensors_header import FLOAT_DTYPES, FP8_DTYPES, TensorInfo


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
# vLLM fuses these checkpoint linears into one runtime layer; all members must share a scheme.
FUSED_GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
EMBEDDING_NAMES = ("embed_tokens.weight", "model.embed_tokens.weight")
QUANT_SUFFIXES = ("weight_scale", "input_scale", "weight_zero_point", "output_scale")


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

    def linear(self, role: str) -> LinearSpec:
        return next(lin for lin in self.linears if lin.role == role)


def expected_linears(fmt: DraftFormat, cfg: DraftConfig) -> tuple[LinearSpec, ...]:
    p, h, q_out, kv_out = fmt.layer_prefix, cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, \
        cfg.num_key_value_heads * cfg.head_dim
    i = cfg.intermediate_size
    return (
        LinearSpec("fc", "fc", h, 3 * cfg.target_hidden_size, Part.FC),
        LinearSpec("q_proj", p + "self_attn.q_proj", q_out, 2 * h, Part.ATTENTION),
        LinearSpec("k_proj", p + "self_attn.k_proj", kv_out, 2 * h, Part.ATTENTION),
        LinearSpec("v_proj", p + "self_attn.v_proj", kv_out, 2 * h, Part.ATTENTION),
        LinearSpec("o_proj", p + "self_attn.o_proj", h, q_out, Part.ATTENTION),
        LinearSpec("gate_proj", p + "mlp.gate_proj", i, h, Part.MLP),
        LinearSpec("up_proj", p + "mlp.up_proj", i, h, Part.MLP),
        LinearSpec("down_proj", p + "mlp.down_proj", h, i, Part.MLP),
        LinearSpec("lm_head", "lm_head", cfg.draft_vocab_size, h, Part.LM_HEAD),
    )


def build_layout(fmt: DraftFormat, cfg: DraftConfig, tensors: dict[str, TensorInfo], where: str) -> DraftLayout:
    """Check every expected tensor against the config; classify the rest."""
    _refuse_quantized(tensors, cfg, where)
    p, h, ht = fmt.layer_prefix, cfg.hidden_size, cfg.target_hidden_size
    linears = expected_linears(fmt, cfg)
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

    optional = {
        "d2t": ((cfg.draft_vocab_size,), {"I64"}, Part.VOCAB_MAP),
        "t2d": ((cfg.vocab_size,), {"BOOL"}, Part.VOCAB_MAP),
        "input_norm.weight": ((3 * ht,), FLOAT_DTYPES, Part.NORM),
        **{f"fc_norm.{k}.weight": ((ht,), FLOAT_DTYPES, Part.NORM) for k in range(3)},
        **{name: ((cfg.vocab_size, h), FLOAT_DTYPES, Part.EMBEDDING) for name in EMBEDDING_NAMES},
    }
    present = []
    for name, (shape, dtypes, part) in optional.items():
        if name in tensors:
            _expect(tensors, name, shape, dtypes, where)
            parts[name] = part
            present.append(name)
    extra = tuple(sorted(set(tensors) - set(parts)))
    parts.update({name: Part.EXTRA for name in extra})
    return DraftLayout(fmt, linears, parts, tuple(present), extra)


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
