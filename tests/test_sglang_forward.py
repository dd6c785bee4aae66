"""The sglang_load check's draft forward with SGLang's linears in place (eagle3_quant/engines/sglang/forward.py),
without SGLang: a module tree named as SGLang names its Llama Eagle3 linears (fused qkv and gate_up) stands in for
SGLang's model, so what is tested is the substitution and the logit comparison, not SGLang
(tests/test_sglang_load_mx.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from eagle3_quant.engines.sglang.forward import compare_forward
from eagle3_quant.runtime.loading import load_draft

PAIR_DRAFT = Path(__file__).resolve().parent / "fixtures" / "tiny_pair" / "draft"
SGLANG_NAMES = {"model.fc": ("fc",), "model.layers.0.self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
                "model.layers.0.self_attn.o_proj": ("o_proj",),
                "model.layers.0.mlp.gate_up_proj": ("gate_proj", "up_proj"),
                "model.layers.0.mlp.down_proj": ("down_proj",)}


class _Fused(nn.Linear):
    def forward(self, x):
        return super().forward(x), None                      # SGLang's LinearBase returns (output, bias)


def sglang_like(perturb: str | None = None) -> nn.Module:
    """The draft's BF16 linears under SGLang's module names; `perturb` scales that fused linear's weight."""
    ours = load_draft(PAIR_DRAFT, "cpu", torch.bfloat16, embedding=torch.zeros(1024, 128, dtype=torch.bfloat16))
    by_role = {name.rsplit(".", 1)[-1]: m for name, m in ours.linears().items()}
    root = nn.Module()
    for path, roles in SGLANG_NAMES.items():
        weight = torch.cat([by_role[role].weight.detach() for role in roles])
        linear = _Fused(weight.shape[1], weight.shape[0], bias=False, dtype=torch.bfloat16)
        linear.weight.data.copy_(weight * (1.5 if path == perturb else 1.0))
        parent = root
        for part in path.split(".")[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, nn.Module())
            parent = getattr(parent, part)
        parent.add_module(path.rsplit(".", 1)[-1], linear)
    return root


def test_sglangs_linears_with_the_same_weights_give_the_runtimes_logits():
    result = compare_forward(sglang_like(), PAIR_DRAFT)
    assert result["sglang_linears"] == list(SGLANG_NAMES)
    assert result["max_abs_dlogit"] == 0.0 and result["top1_agreement"] == 1.0 and result["logits_finite"]


@pytest.mark.parametrize("perturbed", ["model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj",
                                       "model.fc"])
def test_a_different_sglang_linear_shows_in_the_logits(perturbed):
    result = compare_forward(sglang_like(perturbed), PAIR_DRAFT)
    assert result["relative_dlogit"] > 0.01                  # above the check's LOGIT_TOLERANCE
