"""The names vLLM gives an Eagle3 draft's linears at load time, and exclude patterns that match them.

vLLM builds the draft's decoder layer at index T = the target's layer count, fuses q/k/v and
gate/up, and prefixes with ``model.``: ``model.fc``, ``model.layers.{T}.self_attn.qkv_proj``,
``model.layers.{T}.self_attn.o_proj``, ``model.layers.{T}.mlp.gate_up_proj``,
``model.layers.{T}.mlp.down_proj``, ``lm_head``. Quark's plain names (``fc``) match none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Target depths the loader check replays: small, Llama-3.1-8B (32), DeepSeek/Kimi (61), large.
CHECK_DEPTHS = (1, 32, 61, 126)


@dataclass(frozen=True)
class RuntimeLayer:
    name: str
    roles: tuple[str, ...]   # checkpoint linears behind it; several when vLLM fuses them

    def shard_names(self) -> tuple[str, ...]:
        """The per-shard names vLLM checks against `exclude` for a fused layer."""
        if len(self.roles) == 1:
            return (self.name,)
        fused = self.name.rsplit(".", 1)[-1]
        return tuple(self.name.replace(fused, role) for role in self.roles)


def runtime_layers(depth: int) -> tuple[RuntimeLayer, ...]:
    layer = f"model.layers.{depth}"
    return (
        RuntimeLayer("model.fc", ("fc",)),
        RuntimeLayer(f"{layer}.self_attn.qkv_proj", ("q_proj", "k_proj", "v_proj")),
        RuntimeLayer(f"{layer}.self_attn.o_proj", ("o_proj",)),
        RuntimeLayer(f"{layer}.mlp.gate_up_proj", ("gate_proj", "up_proj")),
        RuntimeLayer(f"{layer}.mlp.down_proj", ("down_proj",)),
        RuntimeLayer("lm_head", ("lm_head",)),
    )


# The fused runtime layer a checkpoint linear loads into; engines match fused layers by this name only.
FUSED_RUNTIME_NAME = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                      "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def exclude_pattern(role: str) -> str:
    """An anchored ``re:`` pattern for one checkpoint linear: its own name and its fused runtime name, at any
    depth and under any parent (vLLM's and SGLang's runtime names differ)."""
    names = (role, FUSED_RUNTIME_NAME[role]) if role in FUSED_RUNTIME_NAME else (role,)
    body = names[0] if len(names) == 1 else "(" + "|".join(names) + ")"
    return rf"re:(.*\.)?{body}$"
