"""The ids written into a draft's config so that every engine named feeds the layers chosen (`quantize --serve-taps
trained`), and those ids applied to another config (`validate`, `bench`); the weights are never touched."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from eagle3_quant.engines.draft_support import SGLANG_CLASSES
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.taps.conventions import AUX_KEY
from eagle3_quant.taps.engine_rules import NESTED, Feed, engine_feeds, nested_config, reader


@dataclass(frozen=True)
class ServedConfig:
    """A config written so that each engine named feeds `indices`; the weights are never touched."""

    raw: dict[str, Any]
    written: dict[str, Any]               # field -> new value (eagle_config.KEY for the nested one)
    before: dict[str, Any]                # field -> the value it had (None: absent)
    feeds: tuple[Feed, ...]               # what each reader feeds the written config
    problems: tuple[str, ...]             # engines named that still feed other layers, and why


def with_raw(config: DraftConfig, raw: dict[str, Any]) -> DraftConfig:
    """`config` read from `raw` (the ids as reading/config.py reads them: nested first)."""
    aux = nested_config(raw).get(AUX_KEY, raw.get(AUX_KEY))
    return replace(config, raw=raw, aux_layer_ids=tuple(aux) if aux is not None else None)


def served_config(config: DraftConfig, indices: tuple[int, ...], engines: tuple[str, ...],
                  num_layers: int | None) -> ServedConfig:
    """Write the ids so that the engines in `engines` feed `indices`: vLLM's top-level key in its count when a
    vLLM runner feeds other layers, SGLang's nested key (id = index - 1) when SGLang does; unchanged otherwise.
    A config naming no ids gets them written even where the defaults agree: the layers are then the config's,
    not an engine default that a target's depth (or an engine version) decides."""
    final = config.aux_includes_final_layer
    ids = list(indices[:-1] if final else indices)
    raw, written, before, problems = dict(config.raw), {}, {}, []
    feeds = {f.reader: f for f in engine_feeds(config, num_layers)}
    pin = not config.aux_layer_ids and not raw.get(AUX_KEY)
    sglang_off = "sglang" in engines and (pin or feeds["sglang"].indices != tuple(indices))
    if sglang_off and (NESTED in raw or config.architecture in SGLANG_CLASSES):
        if min(ids) < 1:
            problems.append(f"SGLang captures layer outputs (its ids + 1): hidden_states{list(indices)} starts "
                            "with the embeddings, which no SGLang id names")
        else:
            before[f"{NESTED}.{AUX_KEY}"] = nested_config(raw).get(AUX_KEY)
            raw[NESTED] = {**nested_config(raw), AUX_KEY: [i - 1 for i in ids]}
            written[f"{NESTED}.{AUX_KEY}"] = [i - 1 for i in ids]
    vllm_off = pin or any(feeds[r].indices != tuple(indices) for r in ("vllm", "vllm_v2"))
    if written or ("vllm" in engines and vllm_off):
        before[AUX_KEY] = raw.get(AUX_KEY)
        raw[AUX_KEY] = ids
        written[AUX_KEY] = ids
    after = engine_feeds(with_raw(config, raw), num_layers)
    for feed in after:
        if reader(feed.reader).engine in engines and feed.indices != tuple(indices) and not problems:
            problems.append(f"{reader(feed.reader).label} feeds hidden_states{feed.indices}, not "
                            f"{list(indices)} ({feed.problem or feed.source})")
    return ServedConfig(raw, written, before, after, tuple(problems))


def apply_written(config: dict, written: dict) -> dict:
    """`config` with the ids `served_config` wrote (``written``: field -> value, ``eagle_config.KEY`` for the
    nested one): a new dict, key order kept."""
    out = dict(config)
    for key, value in written.items():
        if key.startswith("eagle_config."):
            out["eagle_config"] = {**(out.get("eagle_config") or {}), key.split(".", 1)[1]: value}
        else:
            out[key] = value
    return out
