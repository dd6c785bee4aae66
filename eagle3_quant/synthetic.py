"""Deterministic synthetic Eagle3 drafts in any of the three formats (demo, tests, benchmarks).

The weights are random (seeded), the layout and config are exactly what real exporters write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle3_quant.formats import DraftFormat


@dataclass(frozen=True)
class DraftShape:
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    draft_vocab: int
    target_hidden: int | None = None
    with_embedding: bool = False
    target_layers: int = 32


SHAPES: dict[str, DraftShape] = {
    "tiny": DraftShape(64, 160, 4, 2, 16, 512, 256, target_layers=8),
    "llama3-8b": DraftShape(4096, 14336, 32, 8, 128, 128256, 32000, target_layers=32),
    "kimi-k2.5": DraftShape(7168, 18432, 64, 8, 128, 163840, 32000, with_embedding=True, target_layers=61),
}


def synthetic_tensors(shape: DraftShape, fmt: DraftFormat, seed: int = 0,
                      dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    h, ht = shape.hidden, shape.target_hidden or shape.hidden
    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim

    def linear(out_f: int, in_f: int) -> torch.Tensor:
        return (torch.randn(out_f, in_f, generator=gen) * in_f ** -0.5).to(dtype)

    def norm(n: int) -> torch.Tensor:
        return (1.0 + 0.05 * torch.randn(n, generator=gen)).to(dtype)

    p = fmt.layer_prefix
    tensors = {
        "fc.weight": linear(h, 3 * ht),
        p + "self_attn.q_proj.weight": linear(q_out, 2 * h),
        p + "self_attn.k_proj.weight": linear(kv_out, 2 * h),
        p + "self_attn.v_proj.weight": linear(kv_out, 2 * h),
        p + "self_attn.o_proj.weight": linear(h, q_out),
        p + "mlp.gate_proj.weight": linear(shape.intermediate, h),
        p + "mlp.up_proj.weight": linear(shape.intermediate, h),
        p + "mlp.down_proj.weight": linear(h, shape.intermediate),
        p + "input_layernorm.weight": norm(h),
        p + "hidden_norm.weight": norm(h),
        p + "post_attention_layernorm.weight": norm(h),
        "norm.weight": norm(h),
        "lm_head.weight": linear(shape.draft_vocab, h),
    }
    selected = torch.randperm(shape.vocab, generator=gen)[: shape.draft_vocab].sort().values
    tensors["d2t"] = selected - torch.arange(shape.draft_vocab)
    t2d = torch.zeros(shape.vocab, dtype=torch.bool)
    t2d[selected] = True
    tensors["t2d"] = t2d
    if shape.with_embedding:
        tensors["embed_tokens.weight"] = (torch.randn(shape.vocab, h, generator=gen) * 0.02).to(dtype)
    return tensors


def synthetic_config(shape: DraftShape, fmt: DraftFormat, aux_layer_ids: list[int] | None = None) -> dict:
    layers = shape.target_layers
    aux = aux_layer_ids or [2, layers // 2, layers - 3]
    llama = {
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        "num_hidden_layers": 1,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
    }
    if fmt is DraftFormat.SPECULATORS:
        return {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.2.0",
            "draft_vocab_size": shape.draft_vocab,
            "norm_before_residual": False,
            "target_hidden_size": shape.target_hidden,
            "eagle_aux_hidden_state_layer_ids": aux,
            "transformer_layer_config": {"model_type": "llama", "rope_theta": 500000.0, **llama},
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "verifier": {"name_or_path": "example-org/target", "architectures": ["LlamaForCausalLM"]},
            },
            "torch_dtype": "bfloat16",
        }
    if fmt is DraftFormat.EAGLE:
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float16",
                "draft_vocab_size": shape.draft_vocab, "bos_token_id": 1, "eos_token_id": 2, **llama}
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "torch_dtype": "bfloat16",
              "draft_vocab_size": shape.draft_vocab, "rope_theta": 500000.0, **llama,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True}}
    if shape.target_hidden:
        config["target_hidden_size"] = shape.target_hidden
    return config


def write_synthetic_draft(out: Path, shape: DraftShape | str = "tiny", fmt: DraftFormat = DraftFormat.SPECFORGE,
                          *, seed: int = 0, shards: int = 1, aux_layer_ids: list[int] | None = None) -> Path:
    """Write a draft folder: config.json, generation_config.json and one or `shards` safetensors files."""
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    dtype = torch.float16 if fmt is DraftFormat.EAGLE else torch.bfloat16
    tensors = synthetic_tensors(shape, fmt, seed, dtype)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(synthetic_config(shape, fmt, aux_layer_ids), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
    if shards <= 1:
        save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
        return out
    names = sorted(tensors, key=lambda n: -tensors[n].numel())
    groups: list[list[str]] = [[] for _ in range(shards)]
    for i, name in enumerate(names):
        groups[i % shards].append(name)
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in group}, out / file, metadata={"format": "pt"})
        weight_map.update({n: file for n in group})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out
