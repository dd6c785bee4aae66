"""Named constants and data builders of the calibration tests: a tiny target (4 layers, hidden 64), a draft for it."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_quant.synthetic import DraftShape
from eagle3_quant.synthetic_target import TargetShape

TARGET = TargetShape(layers=4, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=512)
# For 4 layers the default taps [2, L//2, L-3] collide; the draft reads the outputs of layers 0, 1, 2
# (SpecForge count, nested in eagle_config) = hidden_states 1, 2, 3.
DRAFT_IDS = [0, 1, 2]
DRAFT = DraftShape(hidden=32, intermediate=64, heads=4, kv_heads=2, head_dim=8, vocab=TARGET.vocab, draft_vocab=128,
                   target_hidden=TARGET.hidden, target_layers=TARGET.layers)
TOPICS = ["the quick brown fox", "speculative decoding", "a python function", "the moon landing",
          "eight bit floating point", "calibration of a draft model", "even numbers", "a short summary"]


def chat_rows(n: int) -> list[dict]:
    return [{"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": f"Tell me about {TOPICS[i % len(TOPICS)]}, item {i}."},
                          {"role": "assistant", "content": f"Item {i} is about {TOPICS[(i + 3) % 8]}. " * (i % 3 + 1)}]}
            for i in range(n)]


def text_rows(n: int) -> list[dict]:
    return [{"text": f"Item {i}: " + " and ".join(TOPICS[: i % len(TOPICS) + 2]) + "."} for i in range(n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
