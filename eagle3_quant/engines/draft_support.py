"""Which serving engine builds which draft, as data: the draft formats vLLM 0.33 and SGLang 0.5.23 refuse.

Each rule names the engine, the config field it reads and why the engine cannot serve the draft, read from
the engines' own code (docs/families.md, "What the engines serve"):
- vLLM 0.33: deepseek_eagle3.py's ``hf_to_vllm_mapper`` stacks ``kv_a_proj_with_mqa`` into
  ``fused_qkv_a_proj``, a module built only with ``q_lora_rank``; its speculative config turns ``model_type:
  deepseek_v3`` into an MTP draft (``Eagle3DeepSeekMTPModel``, not registered); ``method: eagle3`` prefixes
  an architecture that neither starts nor ends with ``Eagle3`` with ``Eagle3`` (transformers_utils/configs/eagle.py).
- SGLang 0.5.23 registers two Eagle3 draft classes by name (models/registry.py ``EntryClass``):
  ``LlamaForCausalLMEagle3`` (llama_eagle3.py) and ``Eagle3DeepseekV2ForCausalLM`` (kimi_k25_eagle3.py,
  which raises ``Eagle3 MLA layer requires q_lora_rank``); a speculators config has no ``model_type`` and its
  config loader raises; its targets capture exactly the aux layer ids (``set_eagle3_layers_to_capture``:
  ``layers_to_capture = [id + 1 ...]``), never the final layer.
- Both: a target without aux layer ids captures its three default layers ([2, L//2, L-3]: vLLM's
  ``get_eagle3_default_aux_hidden_state_layers``, SGLang's ``set_eagle3_layers_to_capture(None)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eagle3_quant.errors import UnsupportedSourceError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import LLAMA_ARCHITECTURES, MLA_ARCHITECTURES, QWEN3_ARCHITECTURES, DraftFamily
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.schemes import ENGINES

ENGINE_NAMES = {"vllm": "vLLM 0.33", "sglang": "SGLang 0.5.23"}
VLLM_CLASSES = LLAMA_ARCHITECTURES | QWEN3_ARCHITECTURES | MLA_ARCHITECTURES
SGLANG_CLASSES = frozenset({"LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM"})
DEFAULT_TAPS = 3           # what a target captures when the draft names no aux layer ids


@dataclass(frozen=True)
class EngineRefusal:
    engine: str            # "vllm" or "sglang"
    field: str             # the config field the engine reads
    reason: str            # why it cannot serve the draft, one clause

    def line(self) -> str:
        return f"{ENGINE_NAMES[self.engine]} refuses {self.field}: {self.reason}"


def _vllm_class(arch: str) -> str:
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else "Eagle3" + arch


def _mla_without_q_lora(cfg: DraftConfig, fmt: DraftFormat) -> bool:
    return cfg.family is DraftFamily.MLA and cfg.mla is not None and cfg.mla.q_lora_rank is None


def _taps_without_ids(cfg: DraftConfig, fmt: DraftFormat) -> bool:
    return not cfg.aux_layer_ids and cfg.num_aux != DEFAULT_TAPS


@dataclass(frozen=True)
class _Rule:
    engine: str
    field: str
    applies: Callable[[DraftConfig, DraftFormat], bool]
    reason: Callable[[DraftConfig], str]


def _taps_reason(cfg: DraftConfig) -> str:
    return (f"{cfg.num_aux} aux states without eagle_aux_hidden_state_layer_ids: the target then captures its "
            f"{DEFAULT_TAPS} default layers")

RULES: tuple[_Rule, ...] = (
    _Rule("vllm", "architectures",
          lambda cfg, fmt: fmt is not DraftFormat.SPECULATORS and cfg.family is DraftFamily.LLAMA
          and cfg.architecture != "?" and _vllm_class(cfg.architecture) not in VLLM_CLASSES,
          lambda cfg: f"{cfg.architecture} becomes {_vllm_class(cfg.architecture)}, which it does not register"),
    _Rule("vllm", "q_lora_rank", _mla_without_q_lora,
          lambda cfg: "an MLA draft without it: deepseek_eagle3.py stacks kv_a_proj_with_mqa into fused_qkv_a_proj, "
                      "which exists only with q_lora_rank"),
    _Rule("vllm", "model_type",
          lambda cfg, fmt: cfg.family is DraftFamily.MLA and cfg.raw.get("model_type") == "deepseek_v3",
          lambda cfg: "deepseek_v3 makes its speculative config an MTP draft (Eagle3DeepSeekMTPModel, not "
                      "registered); MLA Eagle3 drafts load with model_type kimi_k2"),
    _Rule("vllm", "num_aux_hidden_states", _taps_without_ids, _taps_reason),
    _Rule("sglang", "model_type",
          lambda cfg, fmt: fmt is DraftFormat.SPECULATORS,
          lambda cfg: "a speculators config has none and SGLang's config loader raises"),
    _Rule("sglang", "architectures",
          lambda cfg, fmt: fmt is not DraftFormat.SPECULATORS and cfg.architecture not in SGLANG_CLASSES,
          lambda cfg: f"{cfg.architecture} is not an Eagle3 class it registers (it registers "
                      f"{', '.join(sorted(SGLANG_CLASSES))})"),
    _Rule("sglang", "q_lora_rank", _mla_without_q_lora,
          lambda cfg: "an MLA draft without it: kimi_k25_eagle3.py raises 'Eagle3 MLA layer requires q_lora_rank'"),
    _Rule("sglang", "num_aux_hidden_states",
          lambda cfg, fmt: cfg.aux_includes_final_layer,
          lambda cfg: f"{cfg.num_aux} aux states for {len(cfg.aux_layer_ids or ())} aux layer ids: its targets "
                      "capture the ids only, never the final layer"),
    _Rule("sglang", "num_aux_hidden_states", _taps_without_ids, _taps_reason),
)


def engine_refusals(cfg: DraftConfig, fmt: DraftFormat) -> tuple[EngineRefusal, ...]:
    """Every reason an engine cannot serve this draft, at most one per engine and field."""
    found: dict[tuple[str, str], EngineRefusal] = {}
    for rule in RULES:
        if (rule.engine, rule.field) not in found and rule.applies(cfg, fmt):
            found[(rule.engine, rule.field)] = EngineRefusal(rule.engine, rule.field, rule.reason(cfg))
    return tuple(found.values())


def engines_serving(cfg: DraftConfig, fmt: DraftFormat) -> tuple[str, ...]:
    refused = {r.engine for r in engine_refusals(cfg, fmt)}
    return tuple(e for e in ENGINES if e not in refused)


def check_draft_engines(cfg: DraftConfig, fmt: DraftFormat, engines: tuple[str, ...], path) -> None:
    """Refuse, in one line naming the engine and the config field, a draft one of `engines` cannot serve;
    the hint names the --engine that serves it, if one does."""
    refusals = [r for r in engine_refusals(cfg, fmt) if r.engine in engines]
    if not refusals:
        return
    first = refusals[0]
    serving = engines_serving(cfg, fmt)
    hint = (f"--engine {serving[0]} serves it" if serving else
            "no engine serves it: " + "; ".join(r.line() for r in engine_refusals(cfg, fmt)
                                                 if r.engine != first.engine))
    raise UnsupportedSourceError(f"{ENGINE_NAMES[first.engine]} cannot serve this draft: {first.reason}",
                                 path=path, field=first.field, hint=hint.rstrip(": "))
