"""Typed view of an Eagle3 draft's config.json, whatever its format."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.formats import DraftFormat
from eagle3_quant.limits import load_json_file

AUX_STATES = 3           # vLLM's Eagle3 fc takes 3 x target hidden: one state per aux layer id

MAX_DIM = 1 << 17        # hidden / intermediate sizes beyond this are not a draft
MAX_VOCAB = 1 << 22
MAX_HEADS = 1024


@dataclass(frozen=True)
class DraftConfig:
    architecture: str
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    aux_layer_ids: tuple[int, ...] | None
    norm_before_residual: bool
    torch_dtype: str
    verifier: str | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)


def load_config_file(path: Path) -> dict:
    if not path.is_file():
        raise DraftFormatError("config.json is missing", path=path.parent)
    try:
        raw = load_json_file(path)
    except OSError as exc:
        raise DraftFormatError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    if not isinstance(raw, dict):
        raise DraftFormatError("not a JSON object", path=path)
    for key, expected, ok in _TOP_LEVEL_TYPES:
        if key in raw and not ok(raw[key]):
            raise DraftFormatError(f"{raw[key]!r} is not {expected}", path=path, field=key)
    return raw


_TOP_LEVEL_TYPES = (
    ("architectures", "a list of class names",
     lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v)),
    ("eagle_config", "an object", lambda v: isinstance(v, dict)),
    ("norm_before_residual", "true or false", lambda v: isinstance(v, bool)),
    ("torch_dtype", "a dtype name such as \"bfloat16\"", lambda v: isinstance(v, str)),
)


def parse_config(raw: Mapping[str, Any], fmt: DraftFormat, path: Path) -> DraftConfig:
    """Read the fields the draft needs; every missing or mistyped field is named in the error."""
    layer = raw
    if fmt is DraftFormat.SPECULATORS:
        layer = raw.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise DraftFormatError("speculators config needs an object", path=path,
                                   field="transformer_layer_config")
    read = _Reader(path, layer, "transformer_layer_config." if layer is not raw else "")
    top = _Reader(path, raw, "")
    hidden = read.int("hidden_size", MAX_DIM)
    heads = read.int("num_attention_heads", MAX_HEADS)
    kv_heads = read.int("num_key_value_heads", MAX_HEADS, default=heads)
    head_dim = read.int("head_dim", MAX_DIM, default=hidden // heads if hidden % heads == 0 else None)
    if heads % kv_heads:
        raise DraftFormatError(f"{heads} attention heads are not a multiple of {kv_heads} KV heads",
                               path=path, field="num_key_value_heads")
    vocab = read.int("vocab_size", MAX_VOCAB)
    draft_vocab = top.int("draft_vocab_size", MAX_VOCAB, default=vocab)
    if draft_vocab > vocab:
        raise DraftFormatError(f"draft vocab {draft_vocab} exceeds the target vocab {vocab}", path=path,
                               field="draft_vocab_size")
    eagle_config = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    aux = eagle_config.get("eagle_aux_hidden_state_layer_ids", raw.get("eagle_aux_hidden_state_layer_ids"))
    if aux is not None and (not isinstance(aux, list) or not all(_is_int(i) and i >= 0 for i in aux)):
        raise DraftFormatError(f"{aux!r} is not a list of layer indices", path=path,
                               field="eagle_aux_hidden_state_layer_ids")
    if aux is not None and len(aux) != AUX_STATES:
        raise DraftFormatError(f"lists {len(aux)} aux layer ids, but an Eagle3 draft's fc reads {AUX_STATES} x the "
                               "target hidden size (one state per id)", path=path,
                               field="eagle_aux_hidden_state_layer_ids")
    return DraftConfig(
        architecture=(raw.get("architectures") or ["?"])[0],
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=read.int("intermediate_size", MAX_DIM),
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        target_hidden_size=top.int("target_hidden_size", MAX_DIM, default=hidden)
        if raw.get("target_hidden_size") is not None else hidden,
        rms_norm_eps=read.float("rms_norm_eps", default=1e-6),
        rope_theta=read.float("rope_theta", default=10000.0),
        rope_scaling=layer.get("rope_scaling") if isinstance(layer.get("rope_scaling"), dict) else None,
        max_position_embeddings=read.int("max_position_embeddings", 1 << 24, default=2048),
        aux_layer_ids=tuple(aux) if aux is not None else None,
        # speculators (and vLLM's speculators config path) default it to True; other formats to False
        norm_before_residual=bool(raw.get("norm_before_residual", fmt is DraftFormat.SPECULATORS)),
        torch_dtype=str(layer.get("torch_dtype") or layer.get("dtype") or raw.get("torch_dtype") or "bfloat16"),
        verifier=_verifier(raw),
        raw=raw,
    )


def _verifier(raw: Mapping[str, Any]) -> str | None:
    spec = raw.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("verifier"), dict):
        name = spec["verifier"].get("name_or_path")
        return name if isinstance(name, str) else None
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Reader:
    path: Path
    data: Mapping[str, Any]
    prefix: str

    def int(self, key: str, maximum: int, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise DraftFormatError("missing", path=self.path, field=self.prefix + key)
        if not _is_int(value) or not 0 < value <= maximum:
            raise DraftFormatError(f"{value!r} is not an integer in 1..{maximum}", path=self.path,
                                   field=self.prefix + key)
        return value

    def float(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise DraftFormatError(f"{value!r} is not a positive number (finite)", path=self.path,
                                   field=self.prefix + key)
        return float(value)
