"""`inspect`: what a draft is and what quantizing it would do, from headers only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle3_quant.engines.draft_support import engine_refusals
from eagle3_quant.engines.vllm.names import exclude_pattern
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.hub_headers import read_draft_headers
from eagle3_quant.schemes import DEFAULT_SCHEME, ENGINES, Scheme, get_scheme
from eagle3_quant.taps.summary import taps_summary


@dataclass(frozen=True)
class LinearRow:
    role: str
    module: str
    shape: tuple[int, int]
    dtype: str
    quantize: bool
    reason: str


@dataclass(frozen=True)
class DraftInspection:
    source: str
    format: str
    architecture: str
    family: str                  # the vLLM Eagle3 class it loads into: llama, qwen3 or mla
    hidden_size: int
    intermediate_size: int
    heads: str
    target_hidden_size: int
    target_vocab: int
    draft_vocab: int
    aux_layer_ids: list[int] | None
    verifier: str | None
    weight_files: int
    source_bytes: int
    params_by_part: dict[str, int]
    optional_parts: list[str]
    extra_tensors: list[str]
    scheme: str
    scheme_summary: str
    linears: list[LinearRow]
    vllm_exclude: list[str]
    estimated_output_bytes: int
    engines: dict[str, str | None]  # engine -> None when it serves the draft, else the one-line reason it refuses
    taps: dict                      # per engine the target layers fed, the trained ones, the candidates (taps/)
    artifact_engines: dict          # what `quantize --engine auto` would write it for: requested, serves, left_out

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_output_bytes(draft: DraftCheckpoint, quantized_modules: set[str], scheme: Scheme) -> int:
    """The artifact's bytes: every quantized linear as `scheme` writes it (cost.scheme_tensors), the rest as is."""
    from eagle3_quant.cost import scheme_tensors

    total = 0
    for name, info in draft.checkpoint.tensors.items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module in quantized_modules:
            total += sum(t.nbytes for t in scheme_tensors(scheme, module, info.shape, info.dtype))
        else:
            total += info.nbytes
    return total


def _heads(cfg: DraftConfig) -> str:
    if cfg.mla is None:
        return f"{cfg.num_attention_heads}q/{cfg.num_key_value_heads}kv x {cfg.head_dim}"
    m = cfg.mla
    return (f"{cfg.num_attention_heads} MLA heads, q_lora {m.q_lora_rank or '-'}, kv_lora {m.kv_lora_rank}, "
            f"qk {m.qk_nope_head_dim}+{m.qk_rope_head_dim} rope, v {m.v_head_dim}")


def inspect_draft(src: str | Path, scheme: str = DEFAULT_SCHEME, exclude: Sequence[str] | None = None,
                  quantize_fc: bool = False, revision: str | None = None,
                  target: str | Path | None = None) -> DraftInspection:
    """`target` (a folder or Hub id; its config.json only): the depth the engines' default taps depend on."""
    from eagle3_quant.plan import make_plan
    from eagle3_quant.reading.target_depth import target_layers

    draft = read_draft_headers(src, revision)
    layers = target_layers(target) if target is not None else None
    plan = make_plan(draft, get_scheme(scheme), exclude, quantize_fc)
    cfg = draft.config
    tensors = draft.checkpoint.tensors
    rows = [LinearRow(d.role, d.module, (d.out_features, d.in_features), tensors[d.module + ".weight"].dtype,
                      d.quantize, d.reason) for d in plan.decisions]
    return DraftInspection(
        source=draft.source.describe(),
        format=draft.format.value,
        architecture=cfg.architecture,
        family=cfg.family.value,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        heads=_heads(cfg),
        target_hidden_size=cfg.target_hidden_size,
        target_vocab=cfg.vocab_size,
        draft_vocab=cfg.draft_vocab_size,
        aux_layer_ids=list(cfg.aux_layer_ids) if cfg.aux_layer_ids is not None else None,
        verifier=cfg.verifier,
        weight_files=len(draft.checkpoint.weight_files),
        source_bytes=draft.checkpoint.total_bytes,
        params_by_part=draft.params_by_part(),
        optional_parts=list(draft.layout.optional_present),
        extra_tensors=list(draft.layout.extra),
        scheme=plan.scheme.name,
        scheme_summary=plan.scheme.summary,
        linears=rows,
        vllm_exclude=[exclude_pattern(d.role) for d in plan.excluded],
        estimated_output_bytes=estimate_output_bytes(draft, {d.module for d in plan.quantized}, plan.scheme),
        engines=_engines(draft),
        taps=taps_summary(cfg, layers),
        artifact_engines=plan.engines.to_dict(),
    )


def _engines(draft: DraftCheckpoint) -> dict[str, str | None]:
    refusals = engine_refusals(draft.config, draft.format)
    return {engine: next((r.line() for r in refusals if r.engine == engine), None) for engine in ENGINES}
