"""The names vLLM gives an Eagle3 draft's linears at load time, and exclude patterns that match them.

vLLM builds the draft's decoder layer at index T = the target's layer count, fuses q/k/v and
gate/up, and prefixes with ``model.``: ``model.fc``, ``model.layers.{T}.self_attn.qkv_proj``,
``model.layers.{T}.self_attn.o_proj``, ``model.layers.{T}.mlp.gate_up_proj``,
``model.layers.{T}.mlp.down_proj``, ``lm_head``. Quark's plain names (``fc``) match none of them.
The Qwen3 class names its qkv ``model.layers.{T}.qkv_proj``; the MLA class has its own attention linears.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.reading.families import DraftFamily

# Target depths the loader check replays: small, Llama-3.1-8B (32), DeepSeek/Kimi (61), large.
CHECK_DEPTHS = (1, 32, 61, 126)


@dataclass(frozen=True)
class RuntimeLayer:
    name: str
    roles: tuple[str, ...]   # checkpoint linears behind it; several when vLLM fuses them


def runtime_layers(depth: int, family: DraftFamily = DraftFamily.LLAMA,
                   fused_q_a: bool = True) -> tuple[RuntimeLayer, ...]:
    """The linears vLLM's Eagle3 class for `family` builds, under the names QuarkConfig is asked about.
    `fused_q_a`: an MLA draft with q_lora_rank (q_a_proj + kv_a_proj_with_mqa fused)."""
    layer = f"model.layers.{depth}"
    if family is DraftFamily.MLA:
        attn = f"{layer}.self_attn"
        query = (RuntimeLayer(f"{attn}.fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa")),
                 RuntimeLayer(f"{attn}.q_b_proj", ("q_b_proj",))) if fused_q_a else (
                 RuntimeLayer(f"{attn}.q_proj", ("q_proj",)),
                 RuntimeLayer(f"{attn}.kv_a_proj_with_mqa", ("kv_a_proj_with_mqa",)))
        attention = (*query, RuntimeLayer(f"{attn}.kv_b_proj", ("kv_b_proj",)))
    else:
        # qwen3_eagle3.py builds its replacement qkv_proj without the `self_attn.` level
        qkv = f"{layer}.qkv_proj" if family is DraftFamily.QWEN3 else f"{layer}.self_attn.qkv_proj"
        attention = (RuntimeLayer(qkv, ("q_proj", "k_proj", "v_proj")),)
    return (
        RuntimeLayer("model.fc", ("fc",)),
        *attention,
        RuntimeLayer(f"{layer}.self_attn.o_proj", ("o_proj",)),
        RuntimeLayer(f"{layer}.mlp.gate_up_proj", ("gate_proj", "up_proj")),
        RuntimeLayer(f"{layer}.mlp.down_proj", ("down_proj",)),
        RuntimeLayer("lm_head", ("lm_head",)),
    )


# The fused runtime layer a checkpoint linear loads into; engines match fused layers by this name only.
FUSED_RUNTIME_NAME = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                      "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}
# MLA drafts (vLLM deepseek_eagle3.py) fuse q_a_proj + kv_a_proj_with_mqa; SGLang also tries the shards.
FUSED_RUNTIME_NAME |= {"q_a_proj": "fused_qkv_a_proj", "kv_a_proj_with_mqa": "fused_qkv_a_proj"}


def exclude_pattern(role: str) -> str:
    """An anchored ``re:`` pattern for one checkpoint linear: its own name and its fused runtime name, at any
    depth and under any parent (vLLM's and SGLang's runtime names differ)."""
    names = (role, FUSED_RUNTIME_NAME[role]) if role in FUSED_RUNTIME_NAME else (role,)
    body = names[0] if len(names) == 1 else "(" + "|".join(names) + ")"
    return rf"re:(.*\.)?{body}$"
