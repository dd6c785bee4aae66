"""Bytes one draft step reads for the Llama-3.1-8B- and Kimi-K2.5-shaped drafts: BF16, PTPC, PTPC + 32K vocab.

Computed from dimensions by the cost model (`eagle3_quant.cost`), no files: ``python -m benchmarks.step_bytes``.
"""

from __future__ import annotations

from typing import Any

from eagle3_quant.cost import DraftDims, dims_cost
from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.util.formatting import human_bytes

PRUNED_VOCAB = 32000
# EAGLE3 LLaMA3.1-Instruct-8B (draft vocab already 32K, target's embedding); Kimi-K2.5 (TorchSpec's template:
# MHA, full-vocabulary lm_head, own embedding).
STEP_SHAPES: dict[str, DraftDims] = {
    "llama3.1-8b": DraftDims(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                             intermediate_size=14336, vocab_size=128256, draft_vocab_size=32000),
    "kimi-k2.5": DraftDims(hidden_size=7168, num_attention_heads=64, num_key_value_heads=64, head_dim=128,
                           intermediate_size=12288, vocab_size=163840, embedding=True),
}


def step_bytes() -> dict[str, Any]:
    profile = DEVICE_PROFILES["mi355x"]
    results = {}
    for name, dims in STEP_SHAPES.items():
        variants = {"bf16": dims_cost(dims), "ptpc": dims_cost(dims, quantize=True),
                    f"ptpc + {PRUNED_VOCAB // 1000}K vocab": dims_cost(dims, quantize=True, draft_vocab=PRUNED_VOCAB)}
        base = variants["bf16"].written.total_bytes
        results[name] = {label: {"bytes": c.written.total_bytes, "over_bf16": round(c.written.total_bytes / base, 4),
                                 "bytes_by_part": c.written.bytes_by_part,
                                 "mi355x_step_floor_ms": round(c.written.floor_ms(profile), 5)}
                         for label, c in variants.items()}
    return results


def format_step_bytes(results: dict[str, Any]) -> str:
    lines = [f"{'draft':<12} {'variant':<16} {'step bytes':>11} {'x BF16':>7} {'lm_head':>10} "
             f"{'MI355X floor':>13}  (one draft step, one token; embedding counted as one row)"]
    for name, variants in results.items():
        for i, (label, v) in enumerate(variants.items()):
            lines.append(f"{name if i == 0 else '':<12} {label:<16} {human_bytes(v['bytes']):>11} "
                         f"{v['over_bf16']:>7.3f} {human_bytes(v['bytes_by_part']['lm_head']):>10} "
                         f"{v['mi355x_step_floor_ms']:>10.4f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_step_bytes(step_bytes()))
