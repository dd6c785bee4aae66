"""Calibration tests: named constants, data builders and session fixtures (a pytest plugin, see conftest.py):
a tiny random Llama target (4 layers, hidden 64, BPE tokenizer with a chat template) saved once, a draft for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.synthetic import DraftShape, write_synthetic_draft
from fixtures.synthetic_target import TargetShape, write_tiny_target

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


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    return write_tiny_target(tmp_path_factory.mktemp("target") / "tiny-llama", TARGET)


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory) -> Path:
    return write_synthetic_draft(tmp_path_factory.mktemp("draft") / "draft", DRAFT, aux_layer_ids=DRAFT_IDS)


@pytest.fixture(scope="session")
def tokenizer(tiny_target):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_target)


@pytest.fixture(scope="session")
def target_model(tiny_target):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_target).eval()


@pytest.fixture(scope="session")
def chat_jsonl(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "chat.jsonl", chat_rows(24))
