"""Typed view of an Eagle3 draft's config.json, whatever its format."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError, UnsupportedSourceError
from eagle3_quant.options import LAYER_ID
from eagle3_quant.reading.families import DraftFamily, MlaDims, detect_family
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.reading.limits import json_from_bytes, read_limited_bytes
from eagle3_quant.util.hashing import FileDigest

MAX_DIM = 1 << 17        # hidden / intermediate sizes beyond this are not a draft
MAX_VOCAB = 1 << 22
MAX_HEADS = 1024
DRAFT_LAYERS = 1         # decoder layers an Eagle3 draft's weights hold (formats.detect_format refuses more)


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
    family: DraftFamily = DraftFamily.LLAMA
    mla: MlaDims | None = None       # MLA attention dims, for the MLA family only
    num_aux: int = 3                 # target hidden states fc reads (fc in = num_aux x target hidden)

    @property
    def aux_includes_final_layer(self) -> bool:
        """The draft reads its aux layer ids plus the target's final hidden state (MiniMax-M3's draft)."""
        return self.aux_layer_ids is not None and self.num_aux == len(self.aux_layer_ids) + 1


def load_config_file(path: Path) -> dict:
    return read_config_file(path)[0]


def read_config_file(path: Path) -> tuple[dict, FileDigest]:
    """config.json's object and the digest of the very bytes it was parsed from (one read of the file)."""
    if not path.is_file():
        raise DraftFormatError("config.json is missing", path=path.parent)
    try:
        data = read_limited_bytes(path)
    except OSError as exc:
        raise DraftFormatError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    raw = json_from_bytes(data, path)
    return _checked_config(raw, path), FileDigest(path.name, len(data), hashlib.sha256(data).hexdigest())


def _checked_config(raw, path: Path) -> dict:
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
    if aux is not None and (not isinstance(aux, list) or any(LAYER_ID.problem(i) for i in aux)):
        raise DraftFormatError(f"{aux!r} is not a list of layer indices ({LAYER_ID.text()})", path=path,
                               field="eagle_aux_hidden_state_layer_ids")
    _check_layers(read)
    family = detect_family(raw, path)
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
        family=family,
        mla=_mla_dims(read, path) if family is DraftFamily.MLA else None,
        num_aux=_num_aux(raw, family, aux, path),
    )


MAX_AUX = 16
INDEXER_KEYS = ("index_topk", "index_n_heads", "index_head_dim")     # DeepSeek V3.2's lightning indexer


def _num_aux(raw: Mapping[str, Any], family: DraftFamily, ids: list | None, path: Path) -> int:
    """How many target states fc reads, as vLLM 0.33's Eagle3 classes count them: num_aux_hidden_states
    (Qwen3: num_aux_layers first), else the number of aux layer ids, else 3. One more than the ids means
    the ids plus the target's final layer."""
    keys = ("num_aux_layers", "num_aux_hidden_states") if family is DraftFamily.QWEN3 else ("num_aux_hidden_states",)
    key = next((k for k in keys if raw.get(k) is not None), None)
    if key is None:
        return len(ids) if ids else 3
    count = raw[key]
    if not _is_int(count) or not 1 <= count <= MAX_AUX:
        raise DraftFormatError(f"{count!r} is not an integer in 1..{MAX_AUX}", path=path, field=key)
    if ids and count not in (len(ids), len(ids) + 1):
        raise DraftFormatError(f"{count} aux states do not fit {len(ids)} aux layer ids (the ids, or the ids plus "
                               "the final layer)", path=path, field=key)
    return count


def _mla_dims(read: _Reader, path: Path) -> MlaDims:
    indexer_key = next((k for k in INDEXER_KEYS if read.data.get(k) is not None), None)
    if indexer_key is not None:
        raise UnsupportedSourceError("MLA drafts with a sparse-attention indexer (DeepSeek V3.2) are not supported: "
                                     "no Eagle3 class of vLLM 0.33 or SGLang 0.5.23 builds one", path=path,
                                     field=read.prefix + indexer_key)
    q_lora = read.data.get("q_lora_rank")
    return MlaDims(
        q_lora_rank=None if q_lora is None else read.int("q_lora_rank", MAX_DIM),
        kv_lora_rank=read.int("kv_lora_rank", MAX_DIM),
        qk_nope_head_dim=read.int("qk_nope_head_dim", MAX_DIM),
        qk_rope_head_dim=read.int("qk_rope_head_dim", MAX_DIM),
        v_head_dim=read.int("v_head_dim", MAX_DIM),
    )


def _check_layers(read: _Reader) -> None:
    """num_hidden_layers, when named, must be the one decoder layer the weights hold: vLLM's Eagle3 classes build
    as many as it says (llama_eagle3.py, qwen3_eagle3.py: range(config.num_hidden_layers))."""
    layers = read.data.get("num_hidden_layers")
    if layers is not None and (not _is_int(layers) or layers != DRAFT_LAYERS):
        raise DraftFormatError(f"{layers!r} decoder layers, but the weights hold {DRAFT_LAYERS} (an Eagle3 draft has "
                               "one; vLLM would build as many as this says)", path=read.path,
                               field=read.prefix + "num_hidden_layers")


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
