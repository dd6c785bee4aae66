"""Measure what FP8 (PTPC) costs per MLA runtime layer, to set the kv_b_proj default (docs/families.md).

For each vLLM layer of a random MLA draft (Kimi-like ratios, small), only that layer becomes FP8 (Quark's
weights, per-token dynamic inputs, as vLLM's prefill runs it); kv_b_proj also as vLLM's decode runs it
(the FP8 weight dequantized and absorbed: weight error only). Reported: weight SQNR, the relative L2 error of
the logits and the top-1 disagreement with the BF16 draft, plus each layer's share of a Kimi-K2.5 MLA draft.

    .venv/bin/python -m benchmarks.studies.mla_kv_b
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

import torch

from eagle3_quant import load_draft
from eagle3_quant.reading.families import DraftFamily, MlaDims
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from fixtures.synthetic import SHAPES, DraftShape, write_synthetic_draft

SHAPE = DraftShape(512, 1024, 8, 8, 64, 2048, 2048, target_layers=8, family=DraftFamily.MLA,
                   mla=MlaDims(q_lora_rank=192, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32,
                               v_head_dim=64))
GROUPS = {"fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"), "q_b_proj": ("q_b_proj",),
          "kv_b_proj": ("kv_b_proj",), "o_proj": ("o_proj",), "gate_up_proj": ("gate_proj", "up_proj"),
          "down_proj": ("down_proj",)}


def _fp8(linear: torch.nn.Linear, weight_only: bool) -> torch.nn.Module:
    from eagle3_quant.quantize.sensitivity import quark_weight
    from eagle3_quant.schemes import get_scheme

    w8, scale = quark_weight(linear.weight.detach().to(torch.bfloat16), get_scheme("ptpc_fp8"))
    if weight_only:
        out = torch.nn.Linear(linear.in_features, linear.out_features, bias=False)
        out.weight.data = (w8.float() * scale[:, None]).to(linear.weight.dtype)
        return out
    return Fp8Linear(w8, scale, None, None, mode="dequant")


def measure(seed: int = 0) -> list[tuple[str, float, float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_synthetic_draft(Path(tmp) / "mla", SHAPE, seed=seed)
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, SHAPE.vocab, (4, 64), generator=gen)
        aux = torch.randn(4, 64, 3 * SHAPE.hidden, generator=gen)
        emb = torch.randn(SHAPE.vocab, SHAPE.hidden, generator=gen) * 0.02
        rows = []
        for group, roles in [*GROUPS.items(), ("kv_b_proj (decode: absorbed)", ("kv_b_proj",))]:
            draft = load_draft(folder, dtype=torch.bfloat16, embedding=emb)
            base = draft(ids, aux)[0].float()
            attn = draft.layer.self_attn
            sqnr = []
            for role in roles:
                parent = draft.layer.mlp if role in ("gate_proj", "up_proj", "down_proj") else attn
                linear = getattr(parent, role)
                q = _fp8(linear, weight_only="decode" in group)
                deq = q.weight.float() * q.weight_scale[:, None] if isinstance(q, Fp8Linear) else q.weight.float()
                ref = linear.weight.float()
                sqnr.append(10 * math.log10(ref.pow(2).sum() / (deq - ref).pow(2).sum()))
                setattr(parent, role, q)
            logits = draft(ids, aux)[0].float()
            rel = float((logits - base).norm() / base.norm())
            flip = float((logits.argmax(-1) != base.argmax(-1)).float().mean())
            rows.append((group, min(sqnr), rel, flip))
        return rows


def kimi_shares() -> dict[str, float]:
    shape = SHAPES["kimi-k2.5-mla"]
    dims, h = shape.mla, shape.hidden
    linears = {
        "q_a_proj": dims.q_lora_rank * 2 * h, "q_b_proj": shape.heads * dims.qk_head_dim * dims.q_lora_rank,
        "kv_a_proj_with_mqa": (dims.kv_lora_rank + dims.qk_rope_head_dim) * 2 * h,
        "kv_b_proj": shape.heads * (dims.qk_nope_head_dim + dims.v_head_dim) * dims.kv_lora_rank,
        "o_proj": h * shape.heads * dims.v_head_dim, "mlp": 3 * h * shape.intermediate,
        "fc": h * 3 * h, "lm_head": shape.draft_vocab * h, "embed_tokens": shape.vocab * h}
    total = sum(linears.values())
    return {k: v / total for k, v in linears.items()}


def main() -> None:
    print(f"{'layer FP8 alone':32s} {'weight SQNR dB':>15s} {'logit rel err':>14s} {'top-1 flips':>12s}")
    for seed in (0, 1):
        for group, sqnr, rel, flip in measure(seed):
            print(f"{group:32s} {sqnr:15.2f} {rel:14.5f} {flip:12.4f}   (seed {seed})")
    print("share of a Kimi-K2.5 MLA draft's parameters:")
    for name, share in kimi_shares().items():
        print(f"  {name:20s} {100 * share:6.2f}%")


if __name__ == "__main__":
    sys.exit(main())
